"""`attach` on the screen (issue 41 item 9): the Agent column says at once not to start
`claude` until the references ran; the line goes when the session says "attached"."""

from __future__ import annotations

import sys
from pathlib import Path

from conftest import FROZEN
from scenario import SID, session_start
from screen_text import screen_lines

from portside.core.log import events as ev
from portside.core.log.bus import EventBus
from portside.core.session.review import ReviewGate
from portside.tui.app import make_app

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: doubles
from doubles import MemorySink  # noqa: E402


async def test_attach_says_when_to_start_claude_until_attached() -> None:
    start = session_start()
    start.agent = "claude-code:attached"
    sink = MemorySink()
    history = [sink.append(start)]
    bus = EventBus(sink)
    info = {"project": "/p/mnist", "target": "cpu", "agent": "claude-code:attached",
            "mode": "live", "title": "mnist", "criteria": {}}
    app = make_app(bus=bus, gate=ReviewGate(bus, SID, reviewer="t"), info=info,
                   history=history, clock=lambda: FROZEN)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        app.live.flush()
        await pilot.pause()
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
