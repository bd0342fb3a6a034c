"""Opening a replay off the UI thread: the index, the snapshots, the point, what a screen folds there.

A 1M-event session costs ~0.2 s of CPU to open (the index, the structural fold, the seek, the
compact history of the point) and, with a cold disk, longer waiting on reads. Done in a
thread begun before the screen's imports, its waits on the disk overlap them; its CPU does not:
it is Python on the GIL, like the imports and Textual's start, and two GIL-bound threads cost
more than one (measured: the frame ~40 ms later). So the screen's mount blocks on the future,
the GIL free for the thread, and draws a "loading…" frame only if the opening is still out
after a deadline (tui/replay_app.py); it folds the result when it lands.

With a first frame cached (``first_frame.py``; the store keeps it, ``store/replay_frames.py``)
the thread hands that over first, in a few ms, and builds the replayer only once the screen has
drawn it (``drawn``): before, both halves would share the GIL and the frame come later. Keys
that need the replayer wait for it meanwhile. Without one, the frame is derived from the
prepared opening, and kept once drawn, so the next replay of the same point is one read.

No Textual here. The replayer is handed over whole: the thread never touches it once the
future is done, and the screen never touches it before.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Protocol

from .first_frame import FirstFrame, frame_of
from .history import History, StructuralCache, compact_history
from .index import EventSource
from .player import Replayer
from .state import ReplayState

# How long the thread waits for the screen to say its first frame is drawn before it goes on
# (a screen that never draws: the replayer must come all the same).
DRAWN_WAIT_S = 10.0


class FrameCache(Protocol):
    """Where a session's first frame at one point is kept (the store: replay_frames)."""

    def load(self) -> FirstFrame | None: ...

    def save(self, frame: FirstFrame) -> bool: ...


@dataclass
class Opening:
    """A replay ready for a screen: the replayer at its start point and what to fold there."""

    replayer: Replayer
    structural: StructuralCache
    markers: list[tuple[int, float, str]]  # the timeline's (seq, offset, kind)
    state: ReplayState | None = None  # the state at the replayer's position (None at 0)
    history: History = field(default_factory=lambda: ([], 0, set()))


def prepare(build: Callable[[], Replayer]) -> Opening:
    """Build the replayer (its index and snapshots, and any --from seek) and the compact
    history at its position."""
    replayer = build()
    structural = StructuralCache(replayer)
    opening = Opening(replayer, structural, replayer.markers())
    if replayer.position > 0:
        opening.state = replayer.seek_state
        opening.history = compact_history(replayer, replayer.position, structural,
                                          replayer.seek_state)
    return opening


class PendingOpening:
    """:func:`prepare` running in a thread of its own, begun at construction. ``source`` is
    what the replayer reads: a screen reads the session's first event from it meanwhile.
    ``cache``: where the first frame is kept. ``frame`` resolves first (the screen draws it),
    ``future`` once the replayer is built."""

    def __init__(self, source: EventSource, build: Callable[[], Replayer],
                 cache: FrameCache | None = None) -> None:
        self.source = source
        self.frame: Future[FirstFrame] = Future()
        self.future: Future[Opening] = Future()
        self.drawn = threading.Event()  # set by the screen once the frame is on it
        self.from_cache = False
        self._build = build
        self._cache = cache
        # A daemon: quitting while it loads must not wait for it.
        self._thread = threading.Thread(target=self._run, name="portside-replay-open",
                                        daemon=True)
        self._thread.start()

    @classmethod
    def of(cls, replayer: Replayer) -> PendingOpening:
        """A replayer built already (a test, the sessions screen): only its point's history
        is left to prepare."""
        return cls(replayer.source, lambda: replayer)

    def _run(self) -> None:
        try:
            frame = self._cached()
            if frame is not None:
                self.from_cache = True
                self.frame.set_result(frame)
                self.drawn.wait(DRAWN_WAIT_S)
                replayer = self._build()
                self.future.set_result(Opening(replayer, StructuralCache(replayer), frame.markers,
                                               replayer.seek_state, frame.history))
                return
            opening = prepare(self._build)
            frame = frame_of(opening.replayer, opening.markers, opening.history)
            self.future.set_result(opening)  # first: a screen given the frame has it all
            self.frame.set_result(frame)
            if self._cache is not None:
                self.drawn.wait(DRAWN_WAIT_S)
                with contextlib.suppress(Exception):  # a cache: never fail the replay over it
                    self._cache.save(frame)
        except BaseException as exc:  # handed to the screen, which ends with it
            for future in (self.frame, self.future):
                if not future.done():
                    future.set_exception(exc)

    def _cached(self) -> FirstFrame | None:
        try:
            return self._cache.load() if self._cache is not None else None
        except Exception:  # a cache: whatever it raised, the events are read instead
            return None

    def result(self, timeout: float | None = None) -> Opening:
        """The opening (waiting for it); raises what the opening raised."""
        return self.future.result(timeout)
