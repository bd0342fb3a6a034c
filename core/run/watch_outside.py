"""A live run seen from outside (local runs): what its processes mapped and opened, sampled
about once a second (core/run/observe.py) and recorded as portside's own ``observed``
records, which the evidence check holds against the facts the run claims."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from portside.core.run import observe

OBSERVE_EVERY_S = 1.0  # how often the run's processes are read from outside


class OutsideView:
    """The run's processes as the kernel shows them; ``writable``: where the run may write
    (a runtime mapped from there is its own, not the host's)."""

    def __init__(self, add_records: Callable[[list[dict[str, Any]], int], None],
                 writable: tuple[str, ...] = ()) -> None:
        self.add_records = add_records
        self.writable = writable
        self.sighting = observe.Sighting()
        self.observed_at = 0.0

    def soon(self) -> None:
        """Look at the next chance: the run has just said its facts, the claim is fresh."""
        self.observed_at = 0.0

    def look(self, pids: list[int], final: bool = False) -> None:
        """Sample ``pids`` (the run's processes alive now) at most every OBSERVE_EVERY_S; a
        record when something new was seen, on the first sample and at the end (``final``:
        the sighting so far, no process read)."""
        now = time.monotonic()
        if not final and now - self.observed_at < OBSERVE_EVERY_S:
            return
        self.observed_at = now
        pids = [] if final else pids
        if not pids and not final:
            return
        seen = observe.sample(self.sighting, pids, self.writable)
        if seen or final or self.sighting.samples == 1:
            self.add_records([self.sighting.record(time.time(), final)], 300)
