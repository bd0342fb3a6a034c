"""The performance and cost sentence under the live header: absent until a reference and a
candidate have passed, then there as the candidate's run.finished arrives, with the numbers
the runs finished with (10 ms vs 20 ms a step: 2× the throughput)."""

from __future__ import annotations

from conftest import until
from scenario import SID, at, run_started, session_start
from screen_text import screen_lines

from portside.core.log import events as ev
from portside.core.log.ledger import fold
from portside.core.log.performance import performance

CPU = {"backend": "cpu", "device_kind": "CPU", "device_name": "cpu", "device_count": 1}


def _finished(run_id: str, dt: float, step_s: float, compile_s: float) -> ev.RunFinished:
    return ev.RunFinished(session_id=SID, ts=at(dt), run_id=run_id, exit_code=0,
                          outcome="passed", wall_s=60.0, steps=100, steady_step_s=step_s,
                          compile_s=compile_s, device=CPU)


async def test_the_sentence_appears_as_the_runs_end(harness):
    app = harness.app()
    async with app.run_test(size=(120, 40)) as pilot:
        log = [session_start(), run_started("ref-1", "reference", 1, 1),
               _finished("ref-1", 2, 0.020, 0.0), run_started("cand-1", "candidate", 1, 3)]
        for e in log:
            harness.bus.publish(e)
        await until(pilot, lambda: "cand-1" in app.model.runs)
        await pilot.pause(0.3)
        bar = app.screen.query_one("#performance")
        assert not bar.display  # a candidate still running: no sentence yet
        end = harness.bus.publish(_finished("cand-1", 4, 0.010, 4.2))
        await until(pilot, lambda: bar.display)
        await pilot.pause(0.2)
        lines = screen_lines(app)
        first = next(i for i, ln in enumerate(lines) if ln.startswith(" performance "))
        assert first <= 3  # right under the header (and the scripted agent's banner)
        shown = " ".join(ln.strip() for ln in lines[first:first + 2])
        assert shown.startswith("performance candidate 2× the reference's steady throughput "
                                "(10 ms vs 20 ms a step)"), shown
        assert "4.2 s of preparation first (reference 0.0 s)" in shown, shown
        # the one fold verify --json prints (cost.performance)
        expected = performance(fold([*log, end]))
        assert expected is not None and " ".join(expected["line"].split()) in shown
