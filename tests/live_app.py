"""The live screen over a list of events, as the TUI tests drive it: a bus on a memory sink,
the events as its history, a frozen clock; ``settle`` lets the first frames land."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from doubles import MemorySink
from scenario import SID

from portside.core.log import events as ev
from portside.core.log.bus import EventBus
from portside.core.session.review import ReviewGate
from portside.tui.app import make_app


def live_app(events: list[ev.Event], clock: Callable[[], float], agent: str = "none"
             ) -> tuple[Any, MemorySink]:
    """The app, and the sink that gives later events their seq."""
    sink = MemorySink()
    history = [sink.append(e) for e in events]
    bus = EventBus(sink)
    info = {"project": "/p/mnist", "target": "cpu", "agent": agent, "mode": "live",
            "title": "mnist", "criteria": {}}
    return make_app(bus=bus, gate=ReviewGate(bus, SID, reviewer="t"), info=info,
                    history=history, clock=clock), sink


async def settle(pilot: Any, app: Any) -> None:
    await pilot.pause()
    app.live.flush()
    await pilot.pause()
