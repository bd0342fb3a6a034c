"""Test doubles for the core's ports: kept out of the production modules they stand in for.

Imported as `from doubles import ...` with tests/ on sys.path (as tests/treehash.py is)."""

from __future__ import annotations

import threading

from portside.core.log import events as ev


class MemorySink:
    """A bus sink that assigns seq like the store does and keeps the events in memory."""

    def __init__(self) -> None:
        self.events: list[ev.Event] = []
        self._lock = threading.Lock()

    def append(self, event: ev.Event) -> ev.Event:
        with self._lock:
            event.seq = len(self.events) + 1
            if not event.ts:
                event.ts = ev.now()
            self.events.append(event)
        return event

    def append_durable(self, event: ev.Event, timeout: float = 30.0) -> ev.Event:
        return self.append(event)
