"""Stored reference runs by their key (core/session/reference_reuse.py): the lookup a new
session's references make before they run.

The ``runs`` table narrows the search to passed references of the same command, target and
seed offset; the key itself is on each one's ``run.started`` in the log (the truth), so no
column or migration is needed. A run's events are then read from its session's log from its
start on.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from portside.core.log import events as ev
from portside.core.safety.secrets import redact_command
from portside.core.session.reference_reuse import StoredReference

from .codec import ROW_COLUMNS, decode_row
from .schema import connect

__all__ = ["StoredReferences"]

CANDIDATES = 20  # newest stored runs of that command looked at for the key


class StoredReferences:
    """A ReferenceSource over one database file (a read-only connection a lookup)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def find(self, key: str, *, command: str, seed_offset: int, target: str
             ) -> list[StoredReference]:
        if not key:
            return []
        conn = connect(self.path, readonly=True)
        try:
            return list(self._find(conn, key, redact_command(command), seed_offset, target))
        finally:
            with contextlib.suppress(sqlite3.Error):
                conn.close()

    def _find(self, conn: sqlite3.Connection, key: str, command: str, seed_offset: int,
              target: str) -> list[StoredReference]:
        rows = conn.execute(
            "SELECT session_id, run_id, seq FROM runs WHERE role = 'reference'"
            " AND outcome = 'passed' AND steps > 0 AND command = ? AND seed_offset = ?"
            " AND target = ? ORDER BY finished_at DESC LIMIT ?",
            (command, seed_offset, target, CANDIDATES)).fetchall()
        found: list[StoredReference] = []
        for session_id, run_id, seq in rows:
            row = conn.execute(f"SELECT {ROW_COLUMNS} FROM events WHERE session_id = ? AND seq = ?",
                               (session_id, seq)).fetchone()
            if row is None:
                continue
            started = decode_row(*row)
            if not isinstance(started, ev.RunStarted) or started.reuse_key != key \
                    or started.run_id != run_id:
                continue
            stored = self._load(conn, session_id, started)
            if stored is not None:
                found.append(stored)
        return found

    @staticmethod
    def _load(conn: sqlite3.Connection, session_id: str, started: ev.RunStarted
              ) -> StoredReference | None:
        """Its output, records and end, from its start on (runs beside it interleave)."""
        out = StoredReference(session_id, started, ev.RunFinished(
            session_id=session_id, run_id=started.run_id, exit_code=None, outcome="running"))
        cur = conn.execute(
            f"SELECT {ROW_COLUMNS} FROM events WHERE session_id = ? AND seq > ?"
            " AND kind IN ('run.output', 'run.record', 'run.finished')"
            " AND json_extract(body, '$.run_id') = ? ORDER BY seq",
            (session_id, started.seq, started.run_id))
        while rows := cur.fetchmany(2000):
            for row in rows:
                e = decode_row(*row)
                if getattr(e, "run_id", None) != started.run_id:
                    continue
                if isinstance(e, ev.RunOutput):
                    out.output.append(e)
                elif isinstance(e, ev.RunRecord):
                    out.records.append(e)
                elif isinstance(e, ev.RunFinished):
                    out.finished = e
                    return out
        return None
