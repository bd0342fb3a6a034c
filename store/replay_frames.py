"""Replay first frames kept in the store: a cache of what ``core/replay/first_frame.py`` holds.

One row per session and start point (``--from`` as written, "start" without one, and the idle
limit, which sets the timeline's offsets). A row is used only when all of it still holds:

* the session's last event is the one it was written after (its seq, ts and kind): events
  appended since, or a session deleted and imported again, make it stale;
* its tag (the ``sha256`` column: an HMAC-SHA256 of the row under this user's frame key,
  :func:`frame_key`) is the one this portside would write: a torn, edited or crafted row (the
  file is plain SQLite anyone who can write it can fill) is refused, with ``miss`` saying so;
* the blob decodes as a frame of this format, the log's events it names read from the log.

The key is a random 32 bytes in a 0600 file beside the database (`<db>-key`, not in the
database: whoever can write the database, or hands it over, holds no key; and a `--db` outside
the home writes nothing into it), made on first use.
Another user, or another machine, tags its own rows: theirs are misses here and are written
again.

Anything else is a miss: the opening is built from the events and the row written again. The
table is made on first use (``CREATE TABLE IF NOT EXISTS``), not by a migration: it is a cache
that holds nothing the log does not, so dropping it loses nothing, and a file without it opens
as before. Writes are best effort: on a read-only or busy file the next replay computes again.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
import sqlite3
from collections.abc import Callable
from pathlib import Path

from portside.core.replay.first_frame import FirstFrame, decode_frame, encode_frame, frame_of
from portside.core.replay.index import ReplayError
from portside.core.replay.opening import prepare
from portside.core.replay.player import DEFAULT_IDLE_LIMIT, FromSpec, Replayer

from .queries import Store
from .replay_source import StoreSource

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS replay_frames (session_id TEXT NOT NULL, point TEXT NOT NULL,"
    " last_seq INTEGER NOT NULL, last_ts REAL NOT NULL, last_kind TEXT NOT NULL,"
    " sha256 TEXT NOT NULL, frame BLOB NOT NULL, PRIMARY KEY (session_id, point))"
)


KEY_BYTES = 32


def frame_key(db: Path) -> bytes:
    """This user's key for the replay frames of the database at ``db``, made on first use: a
    0600 file named as the database's own sidecars are (``<db>-key``, beside ``-wal`` and
    ``-shm``): a `--db` elsewhere writes nothing into the home, a database inside a project
    adds nothing but its own files there, and a user who cannot read the key cannot write a
    row that is drawn."""
    path = Path(str(Path(db).resolve()) + "-key")
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600)
        except FileExistsError:  # another process made it a moment ago
            fd = os.open(path, flags)
        else:
            with os.fdopen(fd, "wb") as f:
                f.write(secrets.token_bytes(KEY_BYTES))
            fd = os.open(path, flags)
    with os.fdopen(fd, "rb") as f:
        key = f.read(KEY_BYTES + 1)
    if len(key) != KEY_BYTES:
        raise OSError(f"{path}: not a replay frame key ({len(key)} bytes)")
    return key


def _tag(key: bytes, session_id: str, point: str, last: tuple[int, float, str],
         blob: bytes) -> str:
    head = "\0".join((session_id, point, str(last[0]), repr(last[1]), last[2])).encode()
    return hmac.new(key, head + b"\0" + blob, hashlib.sha256).hexdigest()


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
        try:
            key = frame_key(self.store.path)
        except OSError as exc:  # no key to check it with: not drawn
            self.miss = f"unchecked: {exc}"
            return None
        tag = _tag(key, self.session_id, self.point, (last_seq, last_ts, last_kind), blob)
        if not hmac.compare_digest(tag, str(digest)):
            self.miss = ("refused: its tag does not match (written without this user's "
                         "frame key: crafted, edited, torn, or from elsewhere)")
            return None
        try:
            frame = decode_frame(blob, StoreSource(self.store, self.session_id).read_seqs)
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
        try:
            tag = _tag(frame_key(self.store.path), self.session_id, self.point, last, blob)
        except OSError:
            return False  # no key: nothing written that could not be checked
        with contextlib.suppress(sqlite3.Error):
            conn.execute(SCHEMA)
            conn.execute(
                "INSERT OR REPLACE INTO replay_frames (session_id, point, last_seq, last_ts,"
                " last_kind, sha256, frame) VALUES (?,?,?,?,?,?,?)",
                (self.session_id, self.point, *last, tag, blob))
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
