"""Outcome classification and run summary."""

from __future__ import annotations

import json

import pytest

from portside.core.checks import Alarm, RunRecords
from portside.core.session.outcome import classify_outcome, summarize_run

ERR = Alarm("numeric-drift", "error", "drift")
CRIT = Alarm("non-finite", "critical", "nan")
WARN = Alarm("slow", "warning", "slow")
INFO = Alarm("recompilation", "info", "eval", key="recompilation:after-training")


@pytest.mark.parametrize(("exit_code", "timed_out", "stalled", "alarms", "outcome"), [
    (0, False, False, [], "passed"),
    (0, False, False, [WARN, INFO], "passed"),
    (0, False, False, [WARN, ERR], "failed-silent"),
    (0, False, False, [CRIT], "failed-silent"),
    (1, False, False, [], "failed-error"),
    (None, False, False, [], "failed-error"),
    (-15, True, False, [ERR], "failed-timeout"),
    (-15, False, True, [], "failed-timeout"),
])
def test_classify(exit_code, timed_out, stalled, alarms, outcome):
    assert classify_outcome(exit_code, timed_out, stalled, alarms) == outcome


def test_summary_reports_compile_apart_from_steady_state():
    recs = [{"type": "facts", "backend": "torch_xla", "device_kind": "CPU", "device_name": "CPU:0",
             "device_count": 1, "real_devices": ["CPU:0"], "pjrt_device": "CPU", "t": 1.0}]
    for i in range(10):
        recs.append({"type": "step", "step": i, "loss": 2.0 - 0.1 * i, "step_s": 2.0 if i < 2 else 0.02,
                     "compiles": 1 if i < 5 else 2, "compile_s": 1.5 if i in (0, 5) else 0.0})
    recs[6]["step_s"] = 0.9  # step 5 compiled: slow, left out of the steady median
    recs += [{"type": "metric", "name": "accuracy", "value": 90.0},
             {"type": "metric", "name": "accuracy", "value": "91.5"},
             {"type": "exit", "steps": 10, "compiles": 3, "compile_s": 4.0}]
    s = summarize_run(RunRecords.from_records(recs), exit_code=0, wall_s=12.5, warmup_steps=3)
    assert s["exit_code"] == 0 and s["wall_s"] == 12.5 and s["steps"] == 10
    assert s["compile_s"] == 3.0 and s["compile_s_outside_steps"] == 1.0 and s["compiles"] == 3
    assert s["steady_step_s"] == pytest.approx(0.02)
    assert s["metrics"] == {"accuracy": 91.5, "loss": pytest.approx(1.1)}
    assert s["device"]["device_kind"] == "CPU" and s["device"]["real_devices"] == ["CPU:0"]
    assert "t" not in s["device"]
    json.dumps(s, allow_nan=False)


def test_summary_of_empty_and_nan_runs():
    s = summarize_run(RunRecords.from_records([]), exit_code=0, wall_s=0.1, warmup_steps=3)
    assert s["steps"] == 0 and s["steady_step_s"] is None and s["metrics"] == {}
    assert s["compile_s"] == 0.0 and s["compiles"] is None and s["device"] == {}
    nan = RunRecords.from_records([{"type": "step", "step": 0, "loss": "nan"}])
    s = summarize_run(nan, exit_code=0, wall_s=1.0, warmup_steps=0)
    assert s["metrics"]["loss"] == "nan"
    json.dumps(s, allow_nan=False)
