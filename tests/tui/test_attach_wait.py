"""`attach` on the screen (issue 41 item 9): the Agent column says at once not to start
`claude` until the references ran; the line goes when the session says "attached"."""

from __future__ import annotations

from conftest import FROZEN
from live_app import live_app, settle
from scenario import SID, session_start
from screen_text import screen_lines

from portside.core.log import events as ev


async def test_attach_says_when_to_start_claude_until_attached() -> None:
    start = session_start()
    start.agent = "claude-code:attached"
    app, sink = live_app([start], lambda: FROZEN, agent="claude-code:attached")
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app)
        (wait,) = app.live.query("#attach-wait")
        assert "do not start `claude` yet" in str(wait.render())
        assert "do not start" in " ".join(screen_lines(app))  # on screen, not past a fold
        app.live.apply([sink.append(ev.SessionState(
            session_id=SID, state="attached", detail="attached to Claude Code in /p/mnist"))])
        app.live.flush()
        await pilot.pause(0.2)
        text = " ".join(screen_lines(app))
        assert not app.live.query("#attach-wait") and "do not start" not in text, text
        assert "attached to Claude Code" in text, text
