"""When a run's pending output lines (or records) become one event.

Every event is a row of the log with an envelope of ~100 bytes; a run printing a line every
0.1 s would pay that per line (3x the line itself). So a batch is held while the run trickles,
but never when it matters: the first item after a quiet spell goes out at the next tick (as
soon as before), a batch that reached ``min_items`` goes out at the next tick, and no item
waits past ``hold_s``. The clock is the caller's (monotonic seconds), so the policy is tested
and measured (tests/bench/bench_db_size.py) without sleeping.
"""

from __future__ import annotations

from typing import Generic, TypeVar

T = TypeVar("T")


class Batcher(Generic[T]):
    """Items pending for one event. ``tick_s``: how often the owner asks :meth:`due`."""

    def __init__(self, *, min_items: int, hold_s: float, tick_s: float,
                 quiet_s: float | None = None) -> None:
        self.min_items = min_items
        self.hold_s = hold_s
        self.tick_s = tick_s
        self.quiet_s = hold_s if quiet_s is None else quiet_s
        self.items: list[T] = []
        self._first_at = 0.0
        self._last_at = float("-inf")  # when the previous item came (none yet: quiet)
        self._urgent = False

    def __len__(self) -> int:
        return len(self.items)

    def add(self, items: list[T], now: float) -> None:
        if not items:
            return
        if not self.items:
            self._first_at = now
            # Quiet before it: someone may be waiting on this line; it is shown at once.
            self._urgent = now - self._last_at >= self.quiet_s
        self.items.extend(items)
        self._last_at = now

    def due(self, now: float) -> bool:
        """Whether the batch goes out now: waiting for the next tick would hold its first
        item past ``hold_s``, or it was urgent, or it is big enough."""
        if not self.items:
            return False
        return (self._urgent or len(self.items) >= self.min_items
                or now - self._first_at + self.tick_s > self.hold_s)

    def take(self) -> list[T]:
        items, self.items = self.items, []
        return items
