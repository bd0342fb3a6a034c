"""Readers. Each thread gets its own connection; WAL means they never block the writer."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from portside.core.log import events as ev
from portside.core.log.ledger import LEDGER_KINDS, Ledger, fold

from .codec import ROW_COLUMNS, full_body
from .recorder import DatabaseGone, Recorder
from .schema import StoreError, connect, migrate


class Store:
    """One SQLite file: a lazily started single writer and per-thread readers."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        conn = connect(self.path)
        try:
            migrate(conn, self.path)
        finally:
            conn.close()
        self._local = threading.local()
        self._recorder: Recorder | None = None
        self._rec_lock = threading.Lock()

    @property
    def recorder(self) -> Recorder:
        with self._rec_lock:
            if self._recorder is None:
                self._recorder = Recorder(self.path)
            return self._recorder

    def close(self) -> None:
        with self._rec_lock:
            if self._recorder is not None:
                self._recorder.close()
                self._recorder = None
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def end_failed_session(self, session_id: str, reason: str, timeout: float = 15.0) -> bool:
        """After recording failed: close the session in the log with ``reason`` if the file
        takes a write again (a fresh writer continues seq from what was committed, so the
        log stays gap-free). Returns whether the session is now ended in the log."""
        with self._rec_lock:
            old, self._recorder = self._recorder, None
        if old is not None:
            with contextlib.suppress(StoreError):
                old.close()
            if isinstance(old.failed, DatabaseGone):
                return False  # the session went with the file: a write here makes a new one
        try:
            if self.conn.execute(
                "SELECT 1 FROM events WHERE session_id = ? AND kind = 'session.ended' LIMIT 1",
                (session_id,),
            ).fetchone():
                return True
            if not self.conn.execute(
                "SELECT 1 FROM events WHERE session_id = ? LIMIT 1", (session_id,)
            ).fetchone():
                return False  # not even session.started was kept
            fresh = Recorder(self.path, busy_timeout_s=2.0, patience_s=timeout)
        except (StoreError, sqlite3.Error):
            return False
        try:
            fresh.append_durable(ev.SessionEnded(session_id=session_id, verdict="fail",
                                                 outcome="failed-error", reason=reason),
                                 timeout=timeout)
            return True
        except Exception:  # still failing (the disk is full): the caller says so
            return False
        finally:
            with contextlib.suppress(StoreError):
                fresh.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- reading -----------------------------------------------------------------------------

    @property
    def conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect(self.path)
            conn.row_factory = sqlite3.Row
            self._local.conn = conn
        return conn

    def resolve_session(self, ref: str) -> str:
        """A full session id, a unique prefix, or 'last'."""
        if ref == "last":
            row = self.conn.execute(
                "SELECT session_id FROM sessions ORDER BY started_at DESC LIMIT 1"
            ).fetchone()
            if row is None:
                raise StoreError(f"{self.path}: no sessions yet")
            return row[0]
        rows = self.conn.execute(
            "SELECT session_id FROM sessions WHERE session_id = ? OR session_id LIKE ? LIMIT 3",
            (ref, ref.replace("%", "") + "%"),
        ).fetchall()
        ids = [r[0] for r in rows]
        if ref in ids:
            return ref
        if not ids:
            raise StoreError(f"{self.path}: no session matches {ref!r}")
        if len(ids) > 1:
            raise StoreError(f"{self.path}: {ref!r} matches several sessions: {', '.join(ids)}")
        return ids[0]

    def sessions(self) -> list[dict[str, Any]]:
        rows = self.conn.execute("SELECT * FROM session_summary ORDER BY started_at DESC")
        return [dict(r) for r in rows]

    def session(self, session_id: str) -> dict[str, Any]:
        row = self.conn.execute(
            "SELECT * FROM session_summary WHERE session_id = ?", (session_id,)
        ).fetchone()
        if row is None:
            raise StoreError(f"{self.path}: no session {session_id!r}")
        return dict(row)

    def events(
        self,
        session_id: str,
        start: int = 1,
        end: int | None = None,
        kinds: Sequence[str] | None = None,
    ) -> Iterator[ev.Event]:
        for body in self.event_bodies(session_id, start, end, kinds):
            yield ev.decode(body)

    def event_bodies(
        self,
        session_id: str,
        start: int = 1,
        end: int | None = None,
        kinds: Sequence[str] | None = None,
    ) -> Iterator[str]:
        sql = f"SELECT {ROW_COLUMNS} FROM events WHERE session_id = ? AND seq >= ?"
        params: list[Any] = [session_id, start]
        if end is not None:
            sql += " AND seq <= ?"
            params.append(end)
        if kinds:
            sql += f" AND kind IN ({','.join('?' * len(kinds))})"
            params.extend(kinds)
        sql += " ORDER BY seq"
        cur = self.conn.execute(sql, params)
        while rows := cur.fetchmany(2000):
            for row in rows:
                yield full_body(*row)

    def event_count(self, session_id: str) -> int:
        return self.conn.execute(
            "SELECT COUNT(*) FROM events WHERE session_id = ?", (session_id,)
        ).fetchone()[0]

    def _table(self, table: str, session_id: str, order: str) -> list[dict[str, Any]]:
        return list(self.iter_table(table, session_id, order))

    def iter_table(self, table: str, session_id: str, order: str) -> Iterator[dict[str, Any]]:
        """A derived table's rows of one session, a row at a time (JSON columns parsed)."""
        cur = self.conn.execute(
            f"SELECT * FROM {table} WHERE session_id = ? ORDER BY {order}", (session_id,)
        )
        while rows := cur.fetchmany(500):
            for r in rows:
                d = dict(r)
                for key in ("metrics", "device", "evidence"):
                    if isinstance(d.get(key), str):
                        d[key] = json.loads(d[key])
                yield d

    def runs(self, session_id: str) -> list[dict[str, Any]]:
        return self._table("runs", session_id, "seq")

    def alarms(self, session_id: str) -> list[dict[str, Any]]:
        return self._table("alarms", session_id, "seq")

    def interventions(self, session_id: str) -> list[dict[str, Any]]:
        return self._table("interventions", session_id, "seq")

    def ledger(self, session_id: str) -> Ledger:
        """The session's facts, folded from its log (only the kinds the ledger reads)."""
        return fold(self.events(session_id, kinds=sorted(LEDGER_KINDS)))

    def intervention_events(self, session_id: str) -> list[ev.Intervention]:
        return [e for e in self.events(session_id, kinds=["intervention"])
                if isinstance(e, ev.Intervention)]
