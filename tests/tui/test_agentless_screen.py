"""A session without an agent (verification only, issue 27 items 8 and 9): the footer carries no
agent keys (a r e m space), and once every run ended the header no longer says `running`."""

from __future__ import annotations

from conftest import FROZEN
from live_app import live_app, settle
from scenario import facts, run_finished, run_started, session_start, steps
from screen_text import screen_lines

from portside.core.log import events as ev


async def _lines(ended: bool) -> list[str]:
    start = session_start()
    start.agent = "none"
    events: list[ev.Event] = [start, run_started("ref-1", "reference", 1, 1), facts("ref-1", 2),
                              steps("ref-1", 5, dt=3), run_finished("ref-1", 4),
                              run_started("cand-1", "candidate", 1, 5), steps("cand-1", 5, dt=6)]
    if ended:
        events.append(run_finished("cand-1", 7))
    app, _ = live_app(events, lambda: FROZEN)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app)
        return screen_lines(app)


async def test_no_agent_keys_and_no_running_once_runs_ended() -> None:
    running = await _lines(ended=False)
    assert "running" in running[0], running[0]
    done = await _lines(ended=True)
    assert "awaiting verdict" in done[0] and "running" not in done[0], done[0]
    footer = done[-1]
    assert "v Verdict" in footer, footer
    for key in ("a Approve", "r Reject", "e Edit", "m Message", "space Pause"):
        assert key not in footer, footer
