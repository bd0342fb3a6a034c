"""The store as a replay source: the index from a cached table, bodies only where asked.

``portside.core.replay.Replayer`` reads a session through this; nothing here loads a whole
session into memory. The index (seq, ts, kind code per event) is what a seek needs;
fetching it row by row costs about 1-2 µs an event in Python, so it is cached, packed, in the
``replay_index`` table (migration v2) and only the events appended since are fetched next time.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Sequence

import numpy as np

from portside.core import events as ev
from portside.core.replay import KIND_CODE, KINDS, IndexArrays

from .queries import Store

_CHUNK = 900  # under SQLite's default limit of host parameters per statement

# The kind → code mapping runs inside SQLite, so Python never touches a million kind strings.
_KIND_CASE = "CASE kind " + " ".join(f"WHEN '{k}' THEN {c}" for k, c in KIND_CODE.items()) + " END"


class StoreSource:
    def __init__(self, store: Store, session_id: str, *, cache: bool = True) -> None:
        self.store = store
        self.session_id = session_id
        self.cache = cache
        self.index_rows_fetched = 0  # how many rows the last index_arrays() read from `events`

    # --- the index ----------------------------------------------------------------------------

    def index_arrays(self) -> IndexArrays:
        conn = self.store.conn
        cached = self._load_cached(conn) if self.cache else None
        base = cached or _empty()
        after = int(base.seqs[-1]) if base.seqs.size else 0
        new = self._fetch_after(conn, after)
        self.index_rows_fetched = int(new.seqs.size)
        if not new.seqs.size:
            return base
        arrays = IndexArrays(
            np.concatenate([base.seqs, new.seqs]),
            np.concatenate([base.ts, new.ts]),
            np.concatenate([base.codes, new.codes]),
        )
        if self.cache:
            self._save(conn, arrays)
        return arrays

    def _fetch_after(self, conn: sqlite3.Connection, after: int) -> IndexArrays:
        cur = conn.cursor()
        cur.row_factory = None  # plain tuples: sqlite3.Row costs more per row
        cur.execute(
            f"SELECT seq, ts, {_KIND_CASE} FROM events"
            " WHERE session_id = ? AND seq > ? ORDER BY seq",
            (self.session_id, after),
        )
        rows = cur.fetchall()
        if not rows:
            return _empty()
        seqs, ts, codes = zip(*rows, strict=True)
        return IndexArrays(
            np.array(seqs, dtype=np.int64),
            np.array(ts, dtype=np.float64),
            np.array(codes, dtype=np.uint8),
        )

    def _load_cached(self, conn: sqlite3.Connection) -> IndexArrays | None:
        row = conn.execute(
            "SELECT upto_seq, seqs, ts, codes, kinds FROM replay_index"
            " WHERE session_id = ?",
            (self.session_id,),
        ).fetchone()
        if row is None or json.loads(row["kinds"]) != list(KINDS):
            return None
        ts = np.frombuffer(row["ts"], dtype="<f8")
        upto = int(row["upto_seq"])
        # The log is append-only; a cache whose last event no longer matches is stale (the
        # session was deleted and re-imported): rebuild rather than trust it.
        last = conn.execute(
            "SELECT ts FROM events WHERE session_id = ? AND seq = ?", (self.session_id, upto)
        ).fetchone()
        if not ts.size or last is None or last[0] != ts[-1]:
            return None
        seqs = (
            np.frombuffer(row["seqs"], dtype="<i8")
            if row["seqs"] is not None
            else np.arange(1, ts.size + 1, dtype=np.int64)
        )
        return IndexArrays(
            seqs,
            ts,
            np.frombuffer(row["codes"], dtype=np.uint8),
        )

    def _save(self, conn: sqlite3.Connection, a: IndexArrays) -> None:
        dense = int(a.seqs[0]) == 1 and int(a.seqs[-1]) == a.seqs.size
        # A cache: on a read-only or busy database the next open just rebuilds it.
        with contextlib.suppress(sqlite3.Error):
            conn.execute(
                "INSERT OR REPLACE INTO replay_index (session_id, upto_seq, seqs, ts, codes,"
                " kinds) VALUES (?,?,?,?,?,?)",
                (
                    self.session_id,
                    int(a.seqs[-1]),
                    None if dense else a.seqs.astype("<i8").tobytes(),
                    a.ts.astype("<f8").tobytes(),
                    a.codes.astype(np.uint8).tobytes(),
                    json.dumps(list(KINDS)),
                ),
            )

    # --- bodies -------------------------------------------------------------------------------

    def read(self, start: int, end: int) -> list[ev.Event]:
        return list(self.store.events(self.session_id, start, end))

    def read_seqs(self, seqs: Sequence[int]) -> list[ev.Event]:
        out: list[ev.Event] = []
        conn = self.store.conn
        for lo in range(0, len(seqs), _CHUNK):
            part = [int(s) for s in seqs[lo : lo + _CHUNK]]
            marks = ",".join("?" * len(part))
            rows = conn.execute(
                f"SELECT body FROM events WHERE session_id = ? AND seq IN ({marks}) ORDER BY seq",
                (self.session_id, *part),
            )
            out.extend(ev.decode(r[0]) for r in rows)
        return out


def _empty() -> IndexArrays:
    return IndexArrays(np.zeros(0, np.int64), np.zeros(0, np.float64), np.zeros(0, np.uint8))


def warm_index(store: Store, session_id: str) -> int:
    """Build or extend a session's cached replay index now (e.g. when a session ends or is
    imported), so its first replay opens fast; returns the number of events indexed."""
    return int(StoreSource(store, session_id).index_arrays().seqs.size)
