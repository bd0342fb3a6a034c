"""The single writer: one thread, one connection, batched commits.

Producers call :meth:`Recorder.append` from any thread; ``seq`` is assigned there, under a lock,
so it is gap-free and known at once. Producers append ready rows to a list; the writer thread
swaps the list out and commits all of it in one transaction (run output arriving at 20k lines/s
batches itself), so per event the writer runs no Python at all, only SQLite's binding. A durable
append (every intervention) returns only after its transaction is committed.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from concurrent.futures import Future
from pathlib import Path

from portside.core.log import events as ev

from .projections import Batch, event_row, has_projection
from .schema import StoreError, connect, migrate

# Another connection (Datasette, the sqlite3 shell) may hold the write lock past SQLite's busy
# timeout: the batch is kept and retried with backoff this long before recording is declared
# failed. A full disk may be freed by someone; it gets a shorter wait.
LOCK_PATIENCE_S = 120.0
FULL_PATIENCE_S = 10.0
_RETRY_FIRST_S, _RETRY_MAX_S = 0.05, 1.0
# How often the writer checks that its path still names the file it writes (deleted or replaced:
# every commit since went to an unlinked inode). Also checked before a flush/durable append is
# acknowledged, so a verdict never stands on a lost file. One check is two stat() calls (~2 µs).
IDENTITY_EVERY_S = 0.5
# How much may wait for the writer before producers wait instead: at 1M steps x 8 ranks on a
# starved machine the writer fell minutes behind the ingest and the queue reached gigabytes.
# Producers block only until the writer swaps the queue out (or recording fails), so memory
# stays under twice this (one batch committing, one queued) and nothing is dropped.
MAX_QUEUED_BYTES = 64 << 20

FileId = tuple[int, int]


class DatabaseGone(StoreError):
    """The database file was deleted or replaced under the writer: what it wrote is lost."""


def _file_id(path: Path) -> FileId | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino)


def _identity_lost(path: Path, known: dict[Path, FileId]) -> str:
    """Why the files the writer opened are no longer at their paths ('' while they are)."""
    for file, was in known.items():
        now = _file_id(file)
        if now is None:
            return f"{file} was deleted while recording"
        if now != was:
            return f"{file} was replaced by another file while recording"
    return ""


def _patience(exc: BaseException) -> float:
    """How long a failed commit is worth retrying (0: never)."""
    if not isinstance(exc, sqlite3.OperationalError):
        return 0.0
    code = getattr(exc, "sqlite_errorcode", None)
    msg = str(exc).lower()
    if code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) or "locked" in msg or "busy" in msg:
        return LOCK_PATIENCE_S
    if code == sqlite3.SQLITE_FULL or "full" in msg:
        return FULL_PATIENCE_S
    return 0.0


class Recorder:
    def __init__(self, path: str | Path, *, busy_timeout_s: float | None = None,
                 patience_s: float | None = None,
                 max_queued_bytes: int = MAX_QUEUED_BYTES) -> None:
        self.path = Path(path)
        self._max_queued = max_queued_bytes
        self._patience_cap = patience_s  # None: LOCK_PATIENCE_S / FULL_PATIENCE_S
        self._conn = connect(self.path)
        if busy_timeout_s is not None:
            self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        migrate(self._conn, self.path)
        # The inodes this writer commits to: the file and its WAL (kept while a connection is open).
        self._files = {f: i for f in (self.path, Path(f"{self.path}-wal"))
                       if (i := _file_id(f)) is not None}
        self._checked_at = time.monotonic()
        # Producers look up where a session's seq resumes on their own connection: the writer's
        # connection belongs to the writer thread.
        self._seq_conn = connect(self.path)
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._room = threading.Condition(self._lock)  # the writer took the queue, or stopped
        self._queued = 0  # bytes of encoded bodies in _rows
        self._next_seq: dict[str, int] = {}
        # What the writer commits next, in append order (swapped out whole by the writer).
        self._rows: list[tuple[str, int, float, str, str]] = []
        self._projected: list[ev.Event] = []  # events with derived rows
        self._waiters: list[Future[None]] = []
        self._writer_idle = False  # waiting on _wake: the next append must notify it
        self._error: BaseException | None = None
        self._gone = ""  # why the file is no longer at its path, once found
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="portside-store-writer", daemon=True)
        self._thread.start()

    # --- producer side -----------------------------------------------------------------------

    def append(self, event: ev.Event) -> ev.Event:
        """Queue an event; returns it with ``seq`` (and ``ts`` when unset) filled in."""
        self._put(event, None)
        return event

    def append_durable(self, event: ev.Event, timeout: float | None = None) -> ev.Event:
        """Append and wait until the event is committed to disk. The writer's own patience
        bounds the wait (committed, or StoreError when recording failed)."""
        done: Future[None] = Future()
        self._put(event, done)
        done.result(timeout=timeout)
        return event

    def record_intervention(self, event: ev.Intervention) -> ev.Intervention:
        """Interventions are never lost to a crash: committed before this returns."""
        self.append_durable(event)
        return event

    def flush(self, timeout: float | None = None) -> None:
        """Wait until everything appended so far is committed."""
        done: Future[None] = Future()
        with self._lock:
            self._check()
            self._waiters.append(done)
            self._notify()
        done.result(timeout=timeout)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._notify()
        self._thread.join()
        self._conn.close()
        self._seq_conn.close()
        if self._error is not None:
            raise self._again() from self._error

    @property
    def failed(self) -> BaseException | None:
        """Why recording stopped, or None while it works."""
        return self._error

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def last_seq(self, session_id: str) -> int:
        with self._lock:
            return self._seq_base(session_id) - 1

    def _check(self) -> None:
        if self._closed:
            raise StoreError(f"{self.path}: recorder is closed")
        if self._error is not None:
            raise self._again() from self._error

    def _again(self) -> StoreError:
        """The error recording failed with, raised anew for another caller (same class)."""
        kind = DatabaseGone if isinstance(self._error, DatabaseGone) else StoreError
        return kind(str(self._error))

    def _seq_base(self, session_id: str) -> int:
        nxt = self._next_seq.get(session_id)
        if nxt is None:
            # Only committed rows can exist for a session this process has not appended to yet.
            row = self._seq_conn.execute(
                "SELECT MAX(seq) FROM events WHERE session_id = ?", (session_id,)
            ).fetchone()
            nxt = (row[0] or 0) + 1
            self._next_seq[session_id] = nxt
        return nxt

    def _notify(self) -> None:
        # Called with the lock held; a busy writer swaps the lists again without being told.
        if self._writer_idle:
            self._writer_idle = False
            self._wake.notify()

    def _put(self, event: ev.Event, done: Future[None] | None) -> None:
        # The ingest hot path (every run.output batch passes here): kept to plain local work.
        sid = event.session_id
        with self._lock:
            if self._closed or self._error is not None:
                self._check()
            while self._queued > self._max_queued:
                self._notify()
                self._room.wait()
                if self._closed or self._error is not None:
                    self._check()
            seq = self._next_seq.get(sid)
            if seq is None:
                seq = self._seq_base(sid)
            self._next_seq[sid] = seq + 1
            event.seq = seq
            if not event.ts:
                event.ts = time.time()
            body = ev.encode(event)
            self._queued += len(body)
            self._rows.append(event_row(event, body))
            if has_projection(event):
                self._projected.append(event)
            if done is not None:
                self._waiters.append(done)
            self._notify()

    # --- writer thread -----------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._lock:
                while not (self._rows or self._waiters or self._closed):
                    self._writer_idle = True
                    self._wake.wait()
                rows, self._rows = self._rows, []
                self._queued = 0
                self._room.notify_all()
                projected, self._projected = self._projected, []
                waiters, self._waiters = self._waiters, []
                stop = self._closed
            if not self._commit(rows, projected, waiters):
                return  # recording failed: nothing after the lost batch is ever committed
            if stop:
                # Appends after close() are refused by _check: nothing can be left.
                return

    def _commit(
        self,
        rows: list[tuple[str, int, float, str, str]],
        projected: list[ev.Event],
        waiters: list[Future[None]],
    ) -> bool:
        """Commit one batch, retrying what may pass (a lock, a full disk) with backoff;
        returns False when recording failed. A batch is never skipped: seq stays gap-free."""
        batch = None
        deadline = None
        delay = _RETRY_FIRST_S
        while True:
            try:
                if rows:
                    if batch is None:
                        batch = Batch()
                        batch.events = rows
                        for event in projected:
                            batch.project(event)
                    self._conn.execute("BEGIN IMMEDIATE")
                    try:
                        batch.write(self._conn)
                        self._conn.execute("COMMIT")
                    except BaseException:
                        if self._conn.in_transaction:
                            with contextlib.suppress(sqlite3.Error):
                                self._conn.execute("ROLLBACK")
                        raise
                break
            except Exception as exc:  # whatever it is, waiters are told and nothing hangs
                patience = _patience(exc)
                if self._patience_cap is not None:
                    patience = min(patience, self._patience_cap)
                now = time.monotonic()
                if deadline is None:
                    deadline = now + patience
                if now + delay < deadline:
                    time.sleep(delay)
                    delay = min(delay * 2, _RETRY_MAX_S)
                    continue
                self._fail(exc, waiters, patience)
                return False
        if not self._still_there(bool(waiters)):
            self._fail(DatabaseGone(self._gone), waiters, 0.0)
            return False
        for waiter in waiters:
            waiter.set_result(None)
        return True

    def _still_there(self, now: bool) -> bool:
        """Whether the path still names the file written to; checked when someone waits for
        the commit (``now``), else at most every IDENTITY_EVERY_S."""
        t = time.monotonic()
        if not now and t - self._checked_at < IDENTITY_EVERY_S:
            return True
        self._checked_at = t
        self._gone = _identity_lost(self.path, self._files)
        return not self._gone

    def _fail(self, exc: BaseException, waiters: list[Future[None]], waited: float) -> None:
        why = f"{exc} (after retrying for {waited:g} s)" if waited else str(exc)
        kind = DatabaseGone if isinstance(exc, DatabaseGone) else StoreError
        error = kind(f"{self.path}: recording failed: {why}")
        with self._lock:
            self._error = error
            self._room.notify_all()  # producers waiting for room raise instead
            waiters = waiters + self._waiters
            self._waiters = []
        for waiter in waiters:
            waiter.set_exception(error)
