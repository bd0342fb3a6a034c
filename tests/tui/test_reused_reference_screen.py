"""Issue 40.1 on the live screen at 120x40: references reused from a stored run are marked
(✓↺ on their tab) and their pane says where they came from."""

from __future__ import annotations

from conftest import FROZEN
from live_app import live_app, settle
from scenario import facts, run_finished, run_started, session_start, steps
from screen_text import screen_lines

from portside.core.log import events as ev
from portside.tui.widgets.run_tabs import RunTabs

ORIGIN = {"session": "20260101-120000-abcd", "run_id": "ref1-aaaaaaaaaaaa",
          "finished_at": 1_767_268_800.0, "host": "vm"}


async def test_reused_references_are_marked_and_say_where_from() -> None:
    start = session_start()
    start.agent = "none"
    events: list[ev.Event] = [start]
    for n in (1, 2):
        st = run_started(f"ref-{n}", "reference", n, 1)
        st.reused_from = dict(ORIGIN, run_id=f"ref{n}-aaaaaaaaaaaa")
        events += [st, facts(f"ref-{n}", 1), steps(f"ref-{n}", 5, dt=1), run_finished(f"ref-{n}", 1)]
    events += [run_started("cand-1", "candidate", 1, 2), steps("cand-1", 5, dt=3)]
    app, _ = live_app(events, lambda: FROZEN)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app)
        screen = "\n".join(screen_lines(app))
        assert "ref#1 ✓↺" in screen and "ref#2 ✓↺" in screen, screen
        assert "cand#1 ●" in screen, screen
        tabs = app.live.query_one(RunTabs)
        tabs.focus()
        await pilot.press("home")  # the first run's pane, as the reviewer opens it
        await pilot.pause()
        app.live.flush()
        await pilot.pause()
        lines = screen_lines(app)
    screen = "\n".join(lines)
    # the pane of a reused reference, wrapped at its width: where it came from, and when
    assert "↺ reused from 20260101-120000-abcd" in screen, screen
    assert "2026-01-01 12:00 UTC on vm, not run again" in screen, screen
