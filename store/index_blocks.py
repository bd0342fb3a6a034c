"""The replay index, kept by the writer: (ts, kind code) of every event, packed in blocks.

A replay opens from the index (seq, ts, kind per event). Built from ``events`` it costs a scan of
the whole log (every page of every body: ~1.5 s for 1M events, more with a cold disk cache), so
the writer keeps it as it appends: each batch extends the session's last block of
``replay_blocks`` (schema v4) or starts a new one. A block covers seqs ``first_seq..last_seq``
with no gap; ``ts`` is float64 and ``codes`` uint8, little-endian, one entry per seq; ``kinds``
names the kind order of the codes. Opening a 1M-event session reads about 250 block rows.

Derived from the log in the same transaction as its events (like every derived table), so it is
never ahead of or behind what was committed; events written by an older portside (no blocks)
are read from ``events`` by the reader (store/replay_source.py).
"""

from __future__ import annotations

import json
import sqlite3
import sys
from array import array
from collections.abc import Sequence
from operator import itemgetter
from typing import Any

from portside.core.log.events import EVENT_TYPES

BLOCK = 4096  # events a block holds: a batch rewrites at most ~36 KB of its last block
KINDS: tuple[str, ...] = tuple(EVENT_TYPES)  # the same order as portside.core.replay.player.KINDS
KINDS_JSON = json.dumps(list(KINDS))
_CODE: dict[str, int] = {k: i for i, k in enumerate(KINDS)}
_SID, _SEQ, _TS, _KIND = itemgetter(0), itemgetter(1), itemgetter(2), itemgetter(3)
_BIG = sys.byteorder == "big"

SCHEMA = (
    "CREATE TABLE replay_blocks (session_id TEXT NOT NULL, first_seq INTEGER NOT NULL,"
    " last_seq INTEGER NOT NULL, ts BLOB NOT NULL, codes BLOB NOT NULL, kinds TEXT NOT NULL,"
    " PRIMARY KEY (session_id, first_seq))"
)


def _pack_ts(rows: Sequence[tuple[Any, ...]]) -> bytes:
    a = array("d", map(_TS, rows))
    if _BIG:
        a.byteswap()
    return a.tobytes()


def _runs(rows: list[tuple[Any, ...]]) -> list[list[tuple[Any, ...]]]:
    """Split one session's rows (in append order) where seq does not follow on."""
    out: list[list[tuple[Any, ...]]] = []
    for row in rows:
        if out and out[-1][-1][1] + 1 == row[1]:
            out[-1].append(row)
        else:
            out.append([row])
    return out


def append(conn: sqlite3.Connection, rows: list[tuple[str, int, float, str, str]]) -> None:
    """Index ``rows`` (event rows just inserted, in append order); the caller's transaction."""
    if not rows:
        return
    first = rows[0][1]
    if len(set(map(_SID, rows))) == 1 and list(map(_SEQ, rows)) == list(
            range(first, first + len(rows))):
        _append_run(conn, rows[0][0], rows)  # the writer's usual batch, checked at C speed
        return
    by_session: dict[str, list[tuple[Any, ...]]] = {}
    for row in rows:
        by_session.setdefault(row[0], []).append(row)
    for sid, srows in by_session.items():
        for run in _runs(srows):
            _append_run(conn, sid, run)


def _append_run(conn: sqlite3.Connection, sid: str, run: Sequence[tuple[Any, ...]]) -> None:
    last = conn.execute(
        "SELECT first_seq, last_seq, ts, codes, kinds FROM replay_blocks WHERE session_id = ?"
        " ORDER BY first_seq DESC LIMIT 1",
        (sid,),
    ).fetchone()
    i = 0
    if last is not None:
        first, upto, ts, codes, kinds = last
        room = BLOCK - (upto - first + 1)
        if room > 0 and upto + 1 == run[0][1] and kinds == KINDS_JSON:
            part = run[:room]
            conn.execute(
                "UPDATE replay_blocks SET last_seq = ?, ts = ?, codes = ?"
                " WHERE session_id = ? AND first_seq = ?",
                (part[-1][1], bytes(ts) + _pack_ts(part),
                 bytes(codes) + bytes(map(_CODE.__getitem__, map(_KIND, part))), sid, first),
            )
            i = len(part)
    while i < len(run):
        part = run[i : i + BLOCK]
        conn.execute(
            "INSERT INTO replay_blocks (session_id, first_seq, last_seq, ts, codes,"
            " kinds) VALUES (?,?,?,?,?,?)",
            (sid, part[0][1], part[-1][1], _pack_ts(part),
             bytes(map(_CODE.__getitem__, map(_KIND, part))), KINDS_JSON),
        )
        i += len(part)
