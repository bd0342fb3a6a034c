"""`L`'s answer where the eye is (issue 41 item 11): at 120x40 the ⌖ line is on screen under the
selected alarm's title, above its evidence (it was appended below and fell past the column's
fold), and pressing `L` again shows the kept answer instead of tracing both commands again."""

from __future__ import annotations

from conftest import FROZEN, until
from doubles import MemorySink
from scenario import SID, at, facts, run_started, session_start, steps
from screen_text import screen_lines

from portside.core.log import events as ev
from portside.core.log.bus import EventBus
from portside.core.session.review import ReviewGate
from portside.tui.app import make_app
from portside.tui.widgets.checks import ChecksPanel

SUMMARY = "first divergence at step 0: clip_grad_norm_ max_norm 1 vs 0.05 (clip)"


def _events() -> list[ev.Event]:
    start = session_start()
    start.agent = "none"
    # numeric-drift's evidence as long as the checks write it: a screenful of pairs
    evidence = {f"key_{i}": [0.1 * i + j / 100 for j in range(20)] for i in range(14)}
    return [start, run_started("ref-1", "reference", 1, 1), facts("ref-1", 2),
            steps("ref-1", 5, dt=3),
            ev.RunFinished(session_id=SID, ts=at(4), run_id="ref-1", exit_code=0,
                           outcome="passed", wall_s=3.0, steps=5),
            run_started("cand-1", "candidate", 1, 5), steps("cand-1", 5, dt=6),
            ev.RunFinished(session_id=SID, ts=at(7), run_id="cand-1", exit_code=0,
                           outcome="failed-silent", wall_s=3.0, steps=5),
            ev.AlarmRaised(session_id=SID, ts=at(8), alarm_id="a-drift", check="numeric-drift",
                           severity="error", title="loss drifts from step 0", run_id="cand-1",
                           evidence=evidence),
            ev.AlarmLocalized(session_id=SID, ts=at(9), alarm_id="a-drift", run_id="cand-1",
                              summary=SUMMARY, divergence={"kind": "clip"})]


async def test_the_answer_is_on_screen_and_l_again_keeps_it() -> None:
    sink = MemorySink()
    history = [sink.append(e) for e in _events()]
    bus = EventBus(sink)
    gate = ReviewGate(bus, SID, reviewer="t")
    traced: list[str] = []
    gate.hooks.localize = lambda alarm_id: traced.append(alarm_id) or "localizing"
    info = {"project": "/p/mnist", "target": "cpu", "agent": "none", "mode": "live",
            "title": "mnist", "criteria": {}}
    app = make_app(bus=bus, gate=gate, info=info, history=history, clock=lambda: FROZEN)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        app.live.flush()
        panel = app.live.query_one(ChecksPanel)
        await until(pilot, lambda: panel._alarm_order, timeout=10)
        panel.select("a-drift")
        await pilot.pause(0.3)
        screen = "\n".join(screen_lines(app))
        assert "⌖ first divergence at step 0" in screen, screen
        await pilot.press("L")
        await pilot.pause(0.3)
        assert traced == []  # not traced again
        shown = [n.message for n in app._notifications]
        assert any(SUMMARY in m for m in shown), shown
