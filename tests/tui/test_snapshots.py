"""Snapshots of the live screen (pytest-textual-snapshot), grouped by feature.

Deterministic: fixed timestamps and ids in the events, a frozen clock for the elapsed time, no
Input on the live screen (no cursor blink), the chart redrawn on demand rather than on a timer.
Update with `pytest tests/tui/test_snapshots.py --snapshot-update` after a deliberate change.
"""

from __future__ import annotations

from typing import Any

from conftest import FROZEN
from scenario import INFO, SID, full_session

from portside.core.bus import EventBus, MemorySink
from portside.core.review import ReviewGate
from portside.tui.app import PortsideApp, make_app
from portside.tui.screens.live import LiveScreen
from portside.tui.widgets.checks import ChecksPanel

SIZE = (120, 40)


def _app() -> PortsideApp:
    sink = MemorySink()
    history = [sink.append(e) for e in full_session()]
    bus = EventBus(sink)
    gate = ReviewGate(bus, SID, reviewer="tester")
    return make_app(bus=bus, gate=gate, info=dict(INFO), history=history, clock=lambda: FROZEN)


async def _settle(pilot: Any) -> None:
    screen = pilot.app.screen
    assert isinstance(screen, LiveScreen)
    await pilot.pause()
    screen.query_one(ChecksPanel).select("a-clip")
    screen.flush()
    await pilot.pause()
    screen.flush()
    await pilot.pause()


class TestLiveScreen:
    def test_diff_card_run_log_and_clipping_alarm_selected(self, snap_compare: Any) -> None:
        assert snap_compare(_app(), run_before=_settle, terminal_size=SIZE)


class TestDiffCard:
    def test_unified_zoomed(self, snap_compare: Any) -> None:
        async def before(pilot: Any) -> None:
            await _settle(pilot)
            await pilot.press("z")
            await pilot.pause()

        assert snap_compare(_app(), run_before=before, terminal_size=SIZE)

    def test_side_by_side_zoomed(self, snap_compare: Any) -> None:
        async def before(pilot: Any) -> None:
            await _settle(pilot)
            await pilot.press("s", "z")
            await pilot.pause()

        assert snap_compare(_app(), run_before=before, terminal_size=SIZE)


class TestHelp:
    def test_help_screen(self, snap_compare: Any) -> None:
        async def before(pilot: Any) -> None:
            await _settle(pilot)
            await pilot.press("question_mark")
            await pilot.pause()

        assert snap_compare(_app(), run_before=before, terminal_size=SIZE)
