"""Snapshots of the live screen (pytest-textual-snapshot), grouped by feature.

Deterministic: fixed timestamps and ids in the events, a frozen clock for the elapsed time, no
Input on the live screen (no cursor blink), the chart redrawn on demand rather than on a timer.
Update with `pytest tests/tui/test_snapshots.py --snapshot-update` after a deliberate change.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import FROZEN
from doubles import MemorySink
from scenario import INFO, SID, full_session, long_edit_session
from screen_text import screen_lines

from portside.core.log.bus import EventBus
from portside.core.session.review import ReviewGate
from portside.tui.app import PortsideApp, make_app
from portside.tui.screens.review import ReviewScreen
from portside.tui.widgets.checks import ChecksPanel

SIZE = (120, 40)


def _app(events: list | None = None) -> PortsideApp:
    sink = MemorySink()
    history = [sink.append(e) for e in (events or full_session())]
    bus = EventBus(sink)
    gate = ReviewGate(bus, SID, reviewer="tester")
    return make_app(bus=bus, gate=gate, info=dict(INFO), history=history, clock=lambda: FROZEN)


async def _settle(pilot: Any) -> None:
    screen = pilot.app.screen
    assert isinstance(screen, ReviewScreen)
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


class TestReviewLayout:
    """An edit awaiting a decision whose change lies far right on its line: the Agent column
    widens, the line wraps with a continuation mark, the changed text is on screen, the alarms
    stay visible. Ground truth: the changed text ("0.05") and the alarm name, read from the
    screen's plain text."""

    @pytest.mark.parametrize("size", [(120, 40), (100, 30), (200, 50)],
                             ids=["120x40", "100x30", "200x50"])
    def test_awaiting_edit_shows_its_change(self, snap_compare: Any, size: tuple[int, int]
                                            ) -> None:
        seen: list[str] = []

        async def before(pilot: Any) -> None:
            await _settle(pilot)
            seen.extend(screen_lines(pilot.app))

        assert snap_compare(_app(long_edit_session()), run_before=before, terminal_size=size)
        agent = [line[: size[0] // 2] for line in seen]  # the Agent column's side of the screen
        assert any("0.05" in line and "+" in line or "↪" in line and "0.05" in line
                   for line in agent), "\n".join(seen)
        assert any("touches gradient clipping" in line for line in seen)
        assert any("clipping-changed" in line for line in seen), "alarms stay visible"
