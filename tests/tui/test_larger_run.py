"""A larger-input run ([larger] criteria) on the screen: its own tab in the run list, and on
the compare view's candidate side, which `C` cycles to (the default stays the candidate)."""

from __future__ import annotations

from conftest import until
from scenario import SID, at, run_finished, run_started, session_start, steps
from screen_text import screen_text

from portside.core.log import events as ev
from portside.tui.screens.compare import CompareScreen


def session() -> list[ev.Event]:
    return [session_start(),
            run_started("ref-1", "reference", 1, 1), steps("ref-1", 12, dt=2),
            run_finished("ref-1", 3, 12, wall_s=5.0),
            run_started("cand-1", "candidate", 1, 4), steps("cand-1", 12, dt=5),
            run_finished("cand-1", 6, 12, wall_s=5.0),
            run_started("big-1", "larger", 1, 7), steps("big-1", 3, dt=8),
            ev.RunOutput(session_id=SID, ts=at(8), run_id="big-1", lines=["step=0 batch=64"]),
            run_finished("big-1", 9, 3, wall_s=5.0)]


async def test_larger_run_has_its_tab_and_a_place_in_compare(harness):
    app = harness.app(history=session())
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: "big-1" in app.model.runs)
        await until(pilot, lambda: "larger#1 ✓" in screen_text(app))
        text = screen_text(app)
        assert "ref#1 ✓" in text and "cand#1 ✓" in text
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, CompareScreen))
        screen = app.screen
        assert isinstance(screen, CompareScreen)
        assert (screen.ref_id, screen.cand_id) == ("ref-1", "cand-1")  # not the larger run
        await pilot.press("C")
        await until(pilot, lambda: screen.cand_id == "big-1")
        await until(pilot, lambda: "larger#1 ✓ passed · 2/2 (C cycles)" in screen_text(app))
        await pilot.press("C")
        await until(pilot, lambda: screen.cand_id == "cand-1")
