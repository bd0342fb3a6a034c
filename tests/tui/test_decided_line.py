"""The verdict as early as the evidence allows (issue 40.3) on the live screen: the Checks
column's first line is the decided fold of the log (core/log/decided.py), the one verify
--json prints. Here at each point of a session whose candidate a clipping change stopped."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import FROZEN
from doubles import MemorySink
from scenario import INFO, SID, at, run_started, session_start
from screen_text import screen_text

from portside.core.log import events as ev
from portside.core.log.bus import EventBus
from portside.core.log.decided import stop_message
from portside.core.log.ledger import STOPPED
from portside.core.session.review import ReviewGate
from portside.tui.app import make_app
from portside.tui.screens.review import ReviewScreen

TITLE = "max_norm changed: 0.05 vs reference 1"


def _log() -> list[ev.Event]:
    return [
        session_start(),
        run_started("ref-1", "reference", 1, 2),
        ev.RunFinished(session_id=SID, ts=at(8), run_id="ref-1", exit_code=0, outcome="passed",
                       wall_s=6.0, steady_step_s=0.025, steps=2000),
        run_started("cand-1", "candidate", 1, 9),
        ev.AlarmRaised(session_id=SID, ts=at(11), alarm_id="a-clip", check="clipping-changed",
                       severity="error", title=TITLE, run_id="cand-1"),
        ev.RunFinished(session_id=SID, ts=at(11.3), run_id="cand-1", exit_code=None, signal=15,
                       outcome="failed-silent", wall_s=2.3, steps=3, reason=STOPPED,
                       error_type="Stopped",
                       error_message=stop_message("clipping-changed", TITLE, 2)),
    ]


async def _checks_text(events: list[ev.Event]) -> str:
    sink = MemorySink()
    history = [sink.append(e) for e in events]
    bus = EventBus(sink)
    app: Any = make_app(bus=bus, gate=ReviewGate(bus, SID, reviewer="t"), info=dict(INFO),
                        history=history, clock=lambda: FROZEN)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ReviewScreen)
        screen.flush()
        await pilot.pause()
        return screen_text(app)


@pytest.mark.parametrize(("upto", "shown"), [
    (3, "not decided: no candidate run yet"),
    (4, "not decided: drift judged at the end"),
    (5, "decided: fail — clipping-changed"),
    (6, "decided: fail — clipping-changed, run stopped"),
])
async def test_checks_column_says_whether_decided(upto: int, shown: str) -> None:
    text = await _checks_text(_log()[:upto])
    # The line wraps inside the Checks column: compare its words, in order.
    cells = [line.split("│")[-2] if line.count("│") >= 2 else "" for line in text.splitlines()]
    flat = " ".join(" ".join(cells).split())
    assert shown in flat, text
