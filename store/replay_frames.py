"""Replay first frames kept in the store: a cache of what ``core/replay/first_frame.py`` holds.

One row per session and start point (``--from`` as written, "start" without one, and the idle
limit, which sets the timeline's offsets). A row is used only when all of it still holds:

* the session's last event is the one it was written after (its seq, ts and kind): events
  appended since, or a session deleted and imported again, make it stale;
* the sha256 of its blob is the one written with it (a torn or corrupted row);
* the blob decodes as a frame of this format, its events validated as the log's are.

Anything else is a miss: the opening is built from the events and the row written again. The
table is made on first use (``CREATE TABLE IF NOT EXISTS``), not by a migration: it is a cache
that holds nothing the log does not, so dropping it loses nothing, and a file without it opens
as before. Writes are best effort: on a read-only or busy file the next replay computes again.
"""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
from collections.abc import Callable

from portside.core.replay.first_frame import FirstFrame, decode_frame, encode_frame, frame_of
from portside.core.replay.opening import prepare
from portside.core.replay.player import DEFAULT_IDLE_LIMIT, FromSpec, Replayer, ReplayError

from .queries import Store
from .replay_source import StoreSource

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS replay_frames (session_id TEXT NOT NULL, point TEXT NOT NULL,"
    " last_seq INTEGER NOT NULL, last_ts REAL NOT NULL, last_kind TEXT NOT NULL,"
    " sha256 TEXT NOT NULL, frame BLOB NOT NULL, PRIMARY KEY (session_id, point))"
)


def point_key(spec: FromSpec | None, idle_limit: float | None) -> str:
    """The row's key for a replay opened at ``spec`` (None: the start) with ``idle_limit``."""
    idle = float(idle_limit) if idle_limit and idle_limit > 0 else None  # as Replayer reads it
    return f"{spec if spec is not None else 'start'} idle={idle}"


class FrameCache:
    """The cached first frame of one session at one start point."""

    def __init__(self, store: Store, session_id: str, point: str) -> None:
        self.store = store
        self.session_id = session_id
        self.point = point
        self.miss = ""  # why the last load found no usable frame ("" after a hit)

    def _last(self, conn: sqlite3.Connection) -> tuple[int, float, str] | None:
        row = conn.execute(
            "SELECT seq, ts, kind FROM events WHERE session_id = ? ORDER BY seq DESC LIMIT 1",
            (self.session_id,)).fetchone()
        return None if row is None else (int(row[0]), float(row[1]), str(row[2]))

    def load(self) -> FirstFrame | None:
        """The frame, when the row is there and still true of the log; else None (``miss``)."""
        conn = self.store.conn
        try:
            row = conn.execute(
                "SELECT last_seq, last_ts, last_kind, sha256, frame FROM replay_frames"
                " WHERE session_id = ? AND point = ?", (self.session_id, self.point)).fetchone()
        except sqlite3.OperationalError:  # no table: nothing was ever cached in this file
            row = None
        if row is None:
            self.miss = "none cached"
            return None
        last_seq, last_ts, last_kind, digest, blob = row
        if self._last(conn) != (last_seq, last_ts, last_kind):
            self.miss = "stale: the log changed since it was written"
            return None
        blob = bytes(blob)
        if hashlib.sha256(blob).hexdigest() != digest:
            self.miss = "corrupt: its hash does not match"
            return None
        try:
            frame = decode_frame(blob)
        except ValueError as exc:
            self.miss = f"unreadable: {exc}"
            return None
        if frame.last_seq != last_seq:
            self.miss = "corrupt: it names another end of the log"
            return None
        self.miss = ""
        return frame

    def save(self, frame: FirstFrame) -> bool:
        """Keep ``frame`` (computed from the events now in the log); whether it was written."""
        conn = self.store.conn
        last = self._last(conn)
        if last is None or last[0] != frame.last_seq:
            return False  # events came in while it was computed: it is stale already
        blob = encode_frame(frame)
        with contextlib.suppress(sqlite3.Error):
            conn.execute(SCHEMA)
            conn.execute(
                "INSERT OR REPLACE INTO replay_frames (session_id, point, last_seq, last_ts,"
                " last_kind, sha256, frame) VALUES (?,?,?,?,?,?,?)",
                (self.session_id, self.point, *last, hashlib.sha256(blob).hexdigest(), blob))
            return True
        return False


def warm_frames(store: Store, session_id: str,
                points: tuple[FromSpec | None, ...] = (None, FromSpec("alarm", None)),
                idle_limit: float | None = DEFAULT_IDLE_LIMIT) -> int:
    """Compute and keep the first frames of the replays most often opened (the start, the last
    alarm) now, e.g. when a session ends, so its first replay is one read; returns how many
    were written. A point the session lacks (no alarm) is skipped."""
    source = StoreSource(store, session_id)
    replayer = Replayer(source, idle_limit=idle_limit)
    written = 0
    for spec in points:
        try:  # as `portside replay --from` does: the named event plays first
            replayer.seek(0 if spec is None else replayer.resolve_from(spec) - 1)
        except ReplayError:
            continue
        cache = FrameCache(store, session_id, point_key(spec, idle_limit))
        opening = prepare(_same(replayer))
        written += cache.save(frame_of(replayer, opening.markers, opening.history))
    return written


def _same(replayer: Replayer) -> Callable[[], Replayer]:
    return lambda: replayer
