"""The store as a replay source: the index from a cached table, bodies only where asked.

``portside.core.replay.player.Replayer`` reads a session through this; nothing here loads a whole
session into memory. The index (seq, ts, kind code per event) is what a seek needs;
fetching it row by row costs about 1-2 µs an event in Python and a scan of the whole log, so the
writer keeps it, packed in blocks (``replay_blocks``, migration v4, store/index_blocks.py). A
session written before v4 has its index built from ``events`` once, cached, packed, in the
``replay_index`` table (migration v2); only the events appended since are fetched next time.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Sequence

import numpy as np

from portside.core.log import events as ev
from portside.core.replay.index import KIND_CODE, KINDS, IndexArrays

from .codec import ROW_COLUMNS, decode_row
from .queries import Store

_CHUNK = 900  # under SQLite's default limit of host parameters per statement
_CACHE_MIN_ROWS = 20_000  # rows fetched from `events` that make an index worth caching

# The kind → code mapping runs inside SQLite, so Python never touches a million kind strings.
_KIND_CASE = "CASE kind " + " ".join(f"WHEN '{k}' THEN {c}" for k, c in KIND_CODE.items()) + " END"


class StoreSource:
    def __init__(self, store: Store, session_id: str, *, cache: bool = True,
                 blocks: bool = True) -> None:
        self.store = store
        self.session_id = session_id
        self.cache = cache  # the replay_index table: an index built from `events` before
        self.blocks = blocks  # the writer's replay_blocks (False: what portside did before v4)
        self.index_rows_fetched = 0  # how many rows the last index_arrays() read from `events`
        self.index_blocks_read = 0  # how many of the writer's blocks it read

    # --- the index ----------------------------------------------------------------------------

    def index_arrays(self) -> IndexArrays:
        conn = self.store.conn
        cached = self._load_cached(conn) if self.cache else None
        base = cached or _empty()
        after = int(base.seqs[-1]) if base.seqs.size else 0
        pieces = [base]
        self.index_rows_fetched = 0
        self.index_blocks_read = 0
        if self.blocks:
            after = self._read_blocks(conn, after, pieces)
        new = self._fetch_after(conn, after)
        self.index_rows_fetched += int(new.seqs.size)
        pieces.append(new)
        if len(pieces) == 2 and not new.seqs.size:
            return base
        arrays = IndexArrays(
            np.concatenate([p.seqs for p in pieces]),
            np.concatenate([p.ts for p in pieces]),
            np.concatenate([p.codes for p in pieces]),
        )
        # Only a build from `events` is worth caching: the writer's blocks are read as fast.
        fetched = self.index_rows_fetched
        if self.cache and fetched and (not self.blocks or fetched >= _CACHE_MIN_ROWS):
            self._save(conn, arrays)
        return arrays

    def _read_blocks(self, conn: sqlite3.Connection, after: int, pieces: list[IndexArrays]
                     ) -> int:
        """Append to ``pieces`` the index of events after ``after`` from the writer's blocks,
        filling any range the blocks do not cover (events from an older portside) from
        ``events``; returns the last seq covered."""
        cur = conn.cursor()
        cur.row_factory = None
        cur.execute(
            "SELECT first_seq, last_seq, ts, codes, kinds FROM replay_blocks"
            " WHERE session_id = ? AND last_seq > ? ORDER BY first_seq",
            (self.session_id, after),
        )
        remaps: dict[str, tuple[np.ndarray | None, int]] = {}
        for first, last, ts_blob, code_blob, kinds in cur:
            codes = np.frombuffer(code_blob, dtype=np.uint8)
            ts = np.frombuffer(ts_blob, dtype="<f8")
            if kinds not in remaps:
                remaps[kinds] = _remap(kinds)
            remap, n_kinds = remaps[kinds]
            if (remap is None or codes.size != last - first + 1 or ts.size != codes.size
                    or not codes.size or int(codes.max()) >= n_kinds):
                continue  # unreadable here: the range is read from `events` below
            if first > after + 1:
                gap = self._fetch_after(conn, after, first - 1)
                self.index_rows_fetched += int(gap.seqs.size)
                pieces.append(gap)
            skip = max(0, after + 1 - first)
            pieces.append(IndexArrays(
                np.arange(first + skip, last + 1, dtype=np.int64),
                ts[skip:],
                (remap[codes] if remap.size else codes)[skip:],
            ))
            self.index_blocks_read += 1
            after = last
        return after

    def _fetch_after(self, conn: sqlite3.Connection, after: int, upto: int | None = None
                     ) -> IndexArrays:
        cur = conn.cursor()
        cur.row_factory = None  # plain tuples: sqlite3.Row costs more per row
        cur.execute(
            f"SELECT seq, ts, {_KIND_CASE} FROM events"
            " WHERE session_id = ? AND seq > ? AND seq <= ? ORDER BY seq",
            (self.session_id, after, ev.INT64_MAX if upto is None else upto),
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
                f"SELECT {ROW_COLUMNS} FROM events WHERE session_id = ? AND seq IN ({marks})"
                " ORDER BY seq",
                (self.session_id, *part),
            )
            out.extend(decode_row(*r) for r in rows)
        return out


def _remap(kinds_json: str) -> tuple[np.ndarray | None, int]:
    """(codes written in another kind order → this build's codes, how many kinds there were);
    an empty map: the same order; None: a kind unknown here, or not a list of kinds."""
    try:
        kinds = json.loads(kinds_json)
    except ValueError:
        return None, 0
    if not isinstance(kinds, list) or any(k not in KIND_CODE for k in kinds):
        return None, 0
    if kinds == list(KINDS):
        return np.zeros(0, np.uint8), len(kinds)
    return np.array([KIND_CODE[k] for k in kinds], dtype=np.uint8), len(kinds)


def _empty() -> IndexArrays:
    return IndexArrays(np.zeros(0, np.int64), np.zeros(0, np.float64), np.zeros(0, np.uint8))


def warm_index(store: Store, session_id: str) -> int:
    """Build or extend a session's cached replay index now (e.g. when a session ends or is
    imported), so its first replay opens fast; returns the number of events indexed."""
    return int(StoreSource(store, session_id).index_arrays().seqs.size)
