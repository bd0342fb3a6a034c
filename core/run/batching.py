"""When a run's pending output lines (or records) become one event.

Every event is a row of the log with an envelope of ~100 bytes; a run printing a line every
0.1 s would pay that per line (3x the line itself). So a batch is held while the run trickles,
but never when it matters: the first item after a quiet spell goes out at the next tick (as
soon as before), and no item waits past ``hold_s``.

The sizes follow how SQLite keeps a row of ``events`` (a WITHOUT ROWID table): up to ~1000
bytes on its page; beyond that the rest goes to overflow pages of 4 KB, the last one partly
empty (up to ~3.5 KB lost a row). So a batch that fills slowly goes out before it would pass
``small_bytes`` (one page-local row), and one that fills fast (past ``small_bytes`` within one
tick: a burst) is held until it is ``big_bytes`` (the loss then a small part of it) or old.
The clock is the caller's (monotonic seconds), so the policy is tested and measured
(tests/bench/bench_db_size.py) without sleeping.
"""

from __future__ import annotations

from typing import Generic, TypeVar

T = TypeVar("T")


class Batcher(Generic[T]):
    """Items pending for one event. ``tick_s``: how often the owner asks :meth:`due`."""

    def __init__(self, *, hold_s: float, tick_s: float, small_bytes: int = 700,
                 big_bytes: int = 16384, quiet_s: float | None = None) -> None:
        self.hold_s = hold_s
        self.tick_s = tick_s
        self.small_bytes = small_bytes
        self.big_bytes = big_bytes
        self.quiet_s = hold_s if quiet_s is None else quiet_s
        self.items: list[T] = []
        self.nbytes = 0
        self._first_at = 0.0
        self._last_at = float("-inf")  # when the previous item came (none yet: quiet)
        self._urgent = False

    def __len__(self) -> int:
        return len(self.items)

    def add(self, items: list[T], now: float, nbytes: int) -> list[T] | None:
        """Add ``items`` (``nbytes`` of them); returns a batch that must go out first (one
        that filled slowly and would pass ``small_bytes`` with them), else None."""
        if not items:
            return None
        out = None
        if (self.items and self.nbytes + nbytes > self.small_bytes >= self.nbytes
                and now - self._first_at >= self.tick_s):
            out = self.take()
        if not self.items:
            self._first_at = now
            # Quiet before it: someone may be waiting on this line; it is shown at once.
            self._urgent = now - self._last_at >= self.quiet_s
        self.items.extend(items)
        self.nbytes += nbytes
        self._last_at = now
        return out

    def due(self, now: float) -> bool:
        """Whether the batch goes out now: it was urgent, or it is big, or waiting for the
        next tick would hold its first item past ``hold_s``."""
        if not self.items:
            return False
        return (self._urgent or self.nbytes >= self.big_bytes
                or now - self._first_at + self.tick_s > self.hold_s)

    def take(self) -> list[T]:
        items, self.items, self.nbytes = self.items, [], 0
        return items
