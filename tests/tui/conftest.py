"""TUI fixtures: a real store in tmp, a real gate, the app from the one factory."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from scenario import INFO, SID, T0

from portside.core.log.bus import EventBus
from portside.core.session.review import ReviewGate
from portside.store import Store
from portside.tui.app import PortsideApp, make_app

FROZEN = T0 + 765.0  # the header's clock in snapshots: 00:12:45 into the session


@dataclass
class Harness:
    store: Store
    bus: EventBus
    gate: ReviewGate
    db: Path

    def app(self, engine_run: Callable[[], Awaitable[None]] | None = None,
            **kwargs: Any) -> PortsideApp:
        kwargs.setdefault("clock", lambda: FROZEN)
        return make_app(bus=self.bus, gate=self.gate, info=dict(INFO), engine_run=engine_run,
                        **kwargs)

    def interventions(self) -> list[dict[str, Any]]:
        """Straight from the SQLite file, not from any widget."""
        conn = sqlite3.connect(self.db)
        conn.row_factory = sqlite3.Row
        try:
            rows = conn.execute("SELECT * FROM interventions WHERE session_id = ? ORDER BY seq",
                                (SID,)).fetchall()
        finally:
            conn.close()
        return [dict(r) for r in rows]


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    db = tmp_path / "portside.db"
    store = Store(db)
    bus = EventBus(store.recorder)
    gate = ReviewGate(bus, SID, reviewer="tester")
    yield Harness(store, bus, gate, db)
    store.close()


async def until(pilot: Any, cond: Callable[[], Any], timeout: float = 60.0) -> None:
    """Wait for a condition instead of sleeping a fixed time. The bound only turns a hang into
    a failure: a loaded machine can take seconds to run the app's events, so it is not short
    (a 5 s bound failed under load on a correct app; speed claims are the benchmarks')."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        if loop.time() > end:
            raise AssertionError(f"timed out waiting for {cond}")
        await pilot.pause(0.01)


async def type_text(pilot: Any, text: str) -> None:
    await pilot.press(*["space" if c == " " else c for c in text])
