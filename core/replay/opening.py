"""Opening a replay off the UI thread: the index, the snapshots, the point, what a screen folds there.

A 1M-event session costs ~0.2 s of CPU to open (the index, the structural fold, the seek, the
compact history of the point) and, with a cold disk, longer waiting on reads. Done in a
thread begun before the screen's imports, its waits on the disk overlap them; its CPU does not:
it is Python on the GIL, like the imports and Textual's start, and two GIL-bound threads cost
more than one (measured: the frame ~40 ms later). So the screen's mount blocks on the future,
the GIL free for the thread, and draws a "loading…" frame only if the opening is still out
after a deadline (tui/replay.py); it folds the result when it lands.

No Textual here. The replayer is handed over whole: the thread never touches it once the
future is done, and the screen never touches it before.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from .history import History, StructuralCache, compact_history
from .player import EventSource, Replayer, ReplayState


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
    what the replayer reads: a screen reads the session's first event from it meanwhile."""

    def __init__(self, source: EventSource, build: Callable[[], Replayer]) -> None:
        self.source = source
        self.future: Future[Opening] = Future()
        self._build = build
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
            self.future.set_result(prepare(self._build))
        except BaseException as exc:  # handed to the screen, which ends with it
            self.future.set_exception(exc)

    def result(self, timeout: float | None = None) -> Opening:
        """The opening (waiting for it); raises what the opening raised."""
        return self.future.result(timeout)
