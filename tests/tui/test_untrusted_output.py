"""Run output is untrusted: escapes, \r progress bars, U+FFFD and huge lines render safely."""

from __future__ import annotations

from conftest import Harness, until
from scenario import output, run_started, session_start
from screen_text import screen_lines, screen_text

from portside.tui.widgets.log_view import LogView

NASTY = [
    "\x1b[31mred\x1b[0m plain \x1b[2J\x1b[H cleared?",
    "\x1b]0;pwned title\x07after osc",
    "epoch 1:  10%|█         | 1/10\r epoch 1:  50%|█████     | 5/10\r epoch 1: 100%|██████████| 10/10",
    "bad utf8 \ufffd\ufffd here",
    "bell\x07 backspace\x08 nul\x00 c1\x9b31m",
    "[bold red]not markup[/] [link=http://x]x[/link]",
    "L" * 200_000,
    "Loss: 0.25 after the long line",
]


async def test_nasty_output_renders_safely(harness: Harness) -> None:
    app = harness.app()
    async with app.run_test(size=(120, 40)) as pilot:
        harness.bus.publish(session_start())
        harness.bus.publish(run_started("cand-1", "candidate", 1, 1))
        harness.bus.publish(output("cand-1", NASTY, 2))
        await until(pilot, lambda: "cand-1" in app.live.model.runs
                    and len(app.live.model.runs["cand-1"].lines) == len(NASTY))
        app.live.flush()
        await pilot.pause(0.2)
        app.live.flush()
        await pilot.pause()
        text = screen_text(app)
        lines = screen_lines(app)
        log = app.screen.query_one(LogView)
        shown = "\n".join(log.visible_text())
    assert "\x1b" not in text and "\x07" not in text and "\x00" not in text
    assert "\x9b" not in text
    assert len(lines) == 40 and all(len(line) == 120 for line in lines), "layout broke"
    assert "[bold red]not markup[/]" in shown  # shown literally, not parsed
    assert "epoch 1: 100%" in shown and "10%|" not in shown  # the \r bar collapsed
    assert "\ufffd" in shown
    assert "more chars]" in shown  # the huge line is cut with a note
    assert "Loss: 0.25 after the long line" in text  # later lines still there
    assert "pwned" not in text
