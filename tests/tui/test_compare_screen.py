"""The compare view (`c`): a reference and a candidate side by side, aligned by training
progress, the differing numbers marked, the selected alarm's step moving both logs."""

from __future__ import annotations

import time

import pytest
from conftest import until
from doubles import MemorySink
from scenario import SID, at, run_started, session_start

from portside.core.log import events as ev
from portside.tui.screens.compare import CompareScreen
from portside.tui.widgets.log_view import LogView
from portside.tui.widgets.step_rows import DIFF_STYLE, StepRows


def _run(run_id: str, role: str, attempt: int, batches: int, dt: float,
         drift_from: int | None = None, epochs: int = 2) -> list[ev.Event]:
    """A run that prints one line per step before the step's record (as a training loop
    does), `batches` steps an epoch; the loss jumps by 50% from step `drift_from`."""
    out: list[ev.Event] = [run_started(run_id, role, attempt, dt)]
    step = 0
    for e in range(epochs):
        for b in range(1, batches + 1):
            loss = 2.0 - 0.02 * (e + b / batches) * 10
            if drift_from is not None and step >= drift_from:
                loss *= 1.5
            out.append(ev.RunOutput(session_id=SID, ts=at(dt), run_id=run_id,
                                    lines=[f"{run_id} step {step} epoch {e} batch {b}"]))
            out.append(ev.RunRecord(session_id=SID, ts=at(dt), run_id=run_id, records=[
                {"type": "step", "rank": 0, "step": step, "epoch": e, "batch": b,
                 "epoch_batches": batches, "loss": round(loss, 6), "grad_norm": 1.0,
                 "lr": [0.1], "max_norm": 1.0}]))
            step += 1
    out.append(ev.RunFinished(session_id=SID, ts=at(dt + 5), run_id=run_id, exit_code=0,
                              outcome="passed", wall_s=5.0, steps=step))
    return out


def session() -> list[ev.Event]:
    # Two references of 10 batches an epoch; the newest candidate drops the last batch (9 an
    # epoch) and drifts from its step 12. An older candidate is there to be cycled to.
    out: list[ev.Event] = [session_start()]
    out += _run("ref-1", "reference", 1, 10, 1)
    out += _run("ref-2", "reference", 2, 10, 10)
    out += _run("cand-1", "candidate", 1, 10, 20)
    out += _run("cand-2", "candidate", 2, 9, 30, drift_from=12)
    out.append(ev.AlarmRaised(session_id=SID, ts=at(40), alarm_id="a-drift",
                              check="numeric-drift", severity="error",
                              title="loss leaves the reference envelope from step 12",
                              run_id="cand-2", evidence={"series": "loss", "first_step": 12}))
    return out


def _cells(rows: StepRows, row: int) -> list[tuple[str, str]]:
    """The row as drawn: (text, style) of each segment of the rendered strip."""
    rows.refresh()
    strip = rows.render_line(row - int(rows.scroll_y))
    return [(seg.text, str(seg.style or "")) for seg in strip]


async def test_compare_view_aligns_marks_and_jumps_both_logs(harness):
    app = harness.app(history=session())
    async with app.run_test(size=(140, 44)) as pilot:
        await pilot.pause()
        await pilot.press("question_mark")  # the key is in the help (and the footer)
        await until(pilot, lambda: type(app.screen).__name__ == "HelpScreen")
        assert "compare" in [b.action for b in app.screen.bindings_shown]
        await pilot.press("escape")
        await until(pilot, lambda: type(app.screen).__name__ != "HelpScreen")
        shown = app.active_bindings.get("c")  # what the footer draws
        assert shown is not None and shown.binding.action == "compare" and shown.enabled
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, CompareScreen))
        screen = app.screen
        assert isinstance(screen, CompareScreen)
        # Defaults: the newest candidate against the first valid reference.
        assert (screen.ref_id, screen.cand_id) == ("ref-1", "cand-2")
        rows = screen.query_one(StepRows)
        await until(pilot, lambda: len(rows.pairing) > 0)
        assert rows.pairing.mode == "progress"

        # Opened on the selected alarm's step: candidate step 12 (epoch 1, batch 4 of 9) on the
        # row of the reference's epoch 1, batch 4 of 10 = its step 13 (nearest progress).
        await until(pilot, lambda: rows.cand is not None
                    and int(rows.cand.steps[rows.pairing.cand[rows.cursor]]) == 12)
        row = rows.cursor
        assert int(rows.ref.steps[rows.pairing.ref[row]]) == 13
        ref_log, cand_log = screen.log_view("ref"), screen.log_view("cand")
        assert isinstance(ref_log, LogView) and isinstance(cand_log, LogView)
        assert ref_log.lines[ref_log.current] == "ref-1 step 13 epoch 1 batch 4"
        assert cand_log.lines[cand_log.current] == "cand-2 step 12 epoch 1 batch 4"
        await pilot.pause()
        # Both logs are on screen there, side by side.
        assert "ref-1 step 13 epoch 1 batch 4" in ref_log.visible_text()
        assert "cand-2 step 12 epoch 1 batch 4" in cand_log.visible_text()

        # The drifting loss is marked on that row, on both sides, and only the loss.
        assert rows.cell_marked(row, "loss") and not rows.cell_marked(row, "lr")
        cells = _cells(rows, row)
        marked = [text.strip() for text, style in cells if "#8b1a1a" in style]
        cand_loss = f"{float(rows.cand.loss[12]):.5g}"
        ref_loss = f"{float(rows.ref.loss[13]):.5g}"
        assert marked == [ref_loss, cand_loss], cells
        assert DIFF_STYLE.endswith("#8b1a1a")
        # Before the drift nothing is marked (the 9 vs 10 batches alone is no difference).
        first = [r for r in range(len(rows.pairing)) if rows.pairing.cand[r] == 0][0]
        assert not rows.any_diff[first]

        # Elsewhere, then back to the alarm's step with `a`: both logs move each time.
        await pilot.press("home")
        await pilot.pause()
        assert ref_log.lines[ref_log.current] == "ref-1 step 0 epoch 0 batch 1"
        assert cand_log.lines[cand_log.current] == "cand-2 step 0 epoch 0 batch 1"
        await pilot.press("a")
        await pilot.pause()
        assert rows.cursor == row
        assert ref_log.lines[ref_log.current] == "ref-1 step 13 epoch 1 batch 4"
        assert cand_log.lines[cand_log.current] == "cand-2 step 12 epoch 1 batch 4"

        # `r` / `C` cycle the runs: the other reference, the older candidate (same batches,
        # so aligned by step).
        await pilot.press("r")
        await until(pilot, lambda: screen.ref_id == "ref-2" and screen.log_view("ref")
                    is not None and screen.log_view("ref").lines is app.model.runs[
                        "ref-2"].lines)
        await pilot.press("C")
        await until(pilot, lambda: screen.cand_id == "cand-1" and rows.pairing.mode == "step")
        assert not rows.any_diff.any()

        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, CompareScreen))


@pytest.mark.slow  # tens of thousands of log lines on both sides
async def test_compare_view_at_large_size_stays_responsive(harness):
    """200,000 steps a run: the view opens and moves without drawing more than the screen."""
    n = 200_000
    events: list[ev.Event] = [session_start()]
    for run_id, role, batches in (("ref-1", "reference", 1000), ("cand-1", "candidate", 999)):
        events.append(run_started(run_id, role, 1, 1))
        recs = [{"type": "step", "step": s, "epoch": s // batches, "batch": s % batches + 1,
                 "epoch_batches": batches, "loss": 1.0 + (s % 7) * 0.01, "grad_norm": 1.0,
                 "lr": [0.1]} for s in range(n)]
        for i in range(0, n, 20_000):
            events.append(ev.RunOutput(session_id=SID, ts=at(2), run_id=run_id,
                                       lines=[f"{run_id} line {j}" for j in range(i, i + 20_000)]))
            events.append(ev.RunRecord(session_id=SID, ts=at(2), run_id=run_id,
                                       records=recs[i:i + 20_000]))
    events.append(ev.AlarmRaised(session_id=SID, ts=at(3), alarm_id="a1", check="numeric-drift",
                                 severity="error", title="drift", run_id="cand-1",
                                 evidence={"first_step": 150_000}))
    app = harness.app(history=events)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        t0 = time.perf_counter()
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, CompareScreen), timeout=30)
        rows = app.screen.query_one(StepRows)
        await until(pilot, lambda: rows.cand is not None and len(rows.pairing) >= n
                    and int(rows.cand.steps[rows.pairing.cand[rows.cursor]]) == 150_000,
                    timeout=30)
        opened = time.perf_counter() - t0
        print(f"compare view opened on 2 x {n:,} steps in {opened:.2f} s")
        assert opened < 15, f"opening took {opened:.1f} s"
        await pilot.press("end")
        await pilot.pause()
        assert rows.cursor == len(rows.pairing) - 1
        # Only the rows on screen were ever formatted: the log view holds its own cache only.
        assert app.screen.log_view("cand").lines is app.model.runs["cand-1"].lines


async def test_compare_view_opens_from_the_replay_screen():
    from portside.core.replay.index import SequenceSource
    from portside.core.replay.player import Replayer
    from portside.tui.replay_app import make_replay_app

    sink = MemorySink()
    events = [sink.append(e) for e in session()]
    replayer = Replayer(SequenceSource(events), speed=8, clock=lambda: 0.0)
    replayer.seek(events[-1].seq)  # the alarm: every run is there
    from scenario import INFO

    app = make_replay_app(replayer, session_id=SID, info=dict(INFO), autoplay=False)
    async with app.run_test(size=(120, 41)) as pilot:
        await until(pilot, lambda: "a-drift" in app.model.alarms)
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, CompareScreen))
        rows = app.screen.query_one(StepRows)
        await until(pilot, lambda: rows.cand is not None
                    and int(rows.cand.steps[rows.pairing.cand[rows.cursor]]) == 12)
        assert app.screen.log_view("cand").lines[app.screen.log_view("cand").current] == \
            "cand-2 step 12 epoch 1 batch 4"
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, CompareScreen))


async def test_compare_view_opened_before_the_runs_takes_them_as_they_start(harness):
    app = harness.app()
    async with app.run_test(size=(120, 40)) as pilot:
        harness.bus.publish(session_start())
        await pilot.pause()
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, CompareScreen))
        screen = app.screen
        header = screen.query_one("#compare-header")
        await until(pilot, lambda: "no pair to compare yet" in header.text.plain)
        events = session()[1:]
        cut = next(i for i, e in enumerate(events) if getattr(e, "run_id", "") == "cand-2")
        for e in events[:cut]:  # the runs start while the view is open
            harness.bus.publish(e)
        rows = screen.query_one(StepRows)
        await until(pilot, lambda: (screen.ref_id, screen.cand_id) == ("ref-1", "cand-1")
                    and len(rows.pairing) == 20 and rows.pairing.mode == "step")
        for e in events[cut:]:  # a newer attempt: the view follows it
            harness.bus.publish(e)
        await until(pilot, lambda: (screen.ref_id, screen.cand_id) == ("ref-1", "cand-2")
                    and len(rows.pairing) == 20 and rows.pairing.mode == "progress")
        await until(pilot, lambda: "ref#1 vs cand#2" in header.text.plain)
        await pilot.press("question_mark")
        await until(pilot, lambda: type(app.screen).__name__ == "HelpScreen")
