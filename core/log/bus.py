"""The session's event bus: every event is appended to the log first, then shown.

Producers (agent, runner, checks, the reviewer's gate) publish; the store assigns ``seq``;
subscribers (the TUI, the headless console, the engine itself) receive the event afterwards, on
the publisher's thread. Every published event is masked first (core/safety/secrets.py mask_event). The core never imports the store: anything with ``append`` and
``append_durable`` will do (the store's Recorder; tests/doubles.py's MemorySink).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

from portside.core.log import events as ev
from portside.core.safety.secrets import mask_event

Subscriber = Callable[[ev.Event], None]


class RecordingFailed(RuntimeError):
    """The sink could not record what a run produced; the run was stopped."""


class Sink(Protocol):
    def append(self, event: ev.Event) -> ev.Event: ...

    def append_durable(self, event: ev.Event, timeout: float = 30.0) -> ev.Event: ...


class EventBus:
    def __init__(self, sink: Sink | None) -> None:
        self.sink = sink
        self._subs: list[Subscriber] = []
        self._lock = threading.Lock()

    def subscribe(self, fn: Subscriber) -> Callable[[], None]:
        with self._lock:
            self._subs.append(fn)

        def unsubscribe() -> None:
            with self._lock:
                if fn in self._subs:
                    self._subs.remove(fn)

        return unsubscribe

    def publish(self, event: ev.Event) -> ev.Event:
        # The one door of every live event: token-shaped secrets masked before the log keeps
        # them or a subscriber shows them (DB, show, replay and exports read the log).
        mask_event(event)
        if self.sink is not None:
            self.sink.append(event)
        self._deliver(event)
        return event

    def publish_durable(self, event: ev.Event) -> ev.Event:
        """For interventions: on disk before anyone is told it happened."""
        mask_event(event)
        if self.sink is not None:
            self.sink.append_durable(event)
        self._deliver(event)
        return event

    def deliver_only(self, event: ev.Event) -> None:
        """Show an event that is already in the log (replay)."""
        self._deliver(event)

    def _deliver(self, event: ev.Event) -> None:
        with self._lock:
            subs = list(self._subs)
        for fn in subs:
            fn(event)
