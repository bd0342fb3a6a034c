"""Checks on hand-made series, at the boundaries of every rule."""

from __future__ import annotations

import dataclasses as dc
import json
import math

import numpy as np
import pytest

from portside.core.checks import (
    Alarm,
    RunEnd,
    RunRecords,
    agent_claim_contradicted,
    budget_exhausted,
    check_budget,
    check_drift,
    run_checks,
)
from portside.core.checks.evidence import UNSET, NonFinite
from portside.core.log.criteria import DEFAULT_CRITERIA, parse_criteria

CPU_FACTS = {"type": "facts", "backend": "cpu", "device_kind": "CPU", "device_name": "cpu",
             "device_count": 1, "real_devices": ["CPU:0"], "pjrt_device": None}
XLA_CPU_FACTS = {**CPU_FACTS, "backend": "torch_xla", "device_name": "CPU:0", "pjrt_device": "CPU"}
TPU_FACTS = {"type": "facts", "backend": "torch_xla", "device_kind": "TPU",
             "device_name": "TPU v5e", "device_count": 4, "real_devices": [f"TPU:{i}" for i in range(4)],
             "pjrt_device": "TPU"}
OK = RunEnd(exit_code=0, wall_s=10.0)


def crit(**sections: dict) -> object:
    """DEFAULT_CRITERIA with some fields replaced, e.g. crit(drift={"smooth": 1})."""
    c = DEFAULT_CRITERIA
    for name, fields in sections.items():
        c = dc.replace(c, **{name: dc.replace(getattr(c, name), **fields)})
    return c


RAW = {"smooth": 1, "noise_z": 0.0, "rtol": 0.0, "atol": 0.0, "window": 5, "series": ("loss",)}
FIXED = {"drift_alpha": 0.0}  # the fixed envelope alone (the calibrated band: test_drift_rate.py)


def kinds(alarms: list[Alarm]) -> set[str]:
    return {a.kind for a in alarms}


def errors(alarms: list[Alarm]) -> list[Alarm]:
    return [a for a in alarms if a.is_error]


def steps(n: int, **cols) -> list[dict]:
    """Step records with per-step values from arrays/scalars/callables."""
    out = []
    for i in range(n):
        rec = {"type": "step", "step": i, "loss": 1.0, "grad_norm": 0.5, "max_norm": None,
               "lr": [0.1], "step_s": 0.01, "compiles": None, "compile_s": None}
        for k, v in cols.items():
            rec[k] = v(i) if callable(v) else (v[i] if isinstance(v, list | np.ndarray) else v)
        out.append(rec)
    return out


def run(records: list[dict], end: RunEnd | None = OK, facts: dict | None = CPU_FACTS) -> RunRecords:
    recs = ([facts] if facts else []) + records
    return RunRecords.from_records(recs, end=end)


def noisy(seed: int, n: int = 2000, scale: float = 1.0, noise: float = 0.2) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    return scale * (2.3 * np.exp(-t / 300) + 0.2) * np.exp(noise * rng.standard_normal(n))


# --- records ---------------------------------------------------------------------------------


def test_records_parse_nonfinite_strings_and_nulls():
    r = RunRecords.from_records([
        {"type": "step", "step": 0, "loss": "nan", "grad_norm": "inf", "lr": [0.1, 0.01]},
        {"type": "step", "step": 1, "loss": None, "grad_norm": "-inf", "lr": 0.2},
        {"type": "metric", "name": "accuracy", "value": 91.2},
        {"type": "metric", "name": "accuracy", "value": "92.5"},
        {"type": "exit", "steps": 2},
    ])
    assert math.isnan(r.loss[0]) and math.isnan(r.loss[1])
    assert r.loss_nonfinite.tolist() == [True, False]  # null is not NaN
    assert r.grad_norm.tolist() == [math.inf, -math.inf]
    assert r.lr_all.shape == (2, 2) and r.lr.tolist() == [0.1, 0.2]
    assert math.isnan(r.lr_all[1, 1])
    assert r.last_metric("accuracy") == 92.5 and r.exit == {"type": "exit", "steps": 2}


# --- numeric-drift ---------------------------------------------------------------------------


def _drift_runs(cand_loss: np.ndarray) -> tuple[list[RunRecords], RunRecords]:
    n = cand_loss.size
    refs = [RunRecords.from_arrays(loss=np.full(n, 1.0)), RunRecords.from_arrays(loss=np.full(n, 2.0))]
    return refs, RunRecords.from_arrays(loss=cand_loss)


@pytest.mark.parametrize(("out", "fires"), [(5, True), (4, False)])
def test_drift_exactly_window_steps_out(out: int, fires: bool):
    loss = np.full(50, 1.5)
    loss[20:20 + out] = 2.5
    refs, cand = _drift_runs(loss)
    alarms = check_drift(refs, cand, crit(drift=RAW, acceptance=FIXED))
    assert bool(alarms) is fires
    if fires:
        ev = alarms[0].evidence
        assert alarms[0].severity == "error" and alarms[0].key == "numeric-drift:loss"
        assert ev.first_step == 20 and ev.alarm_step == 24 and ev.steps_out == 5
        assert ev.direction == "above" and ev.envelope_first == [1.0, 2.0]
        json.dumps(alarms[0].to_dict())


def test_drift_envelope_touching_is_inside():
    loss = np.where(np.arange(50) % 2 == 0, 2.0, 1.0)  # on the edges, never beyond
    refs, cand = _drift_runs(loss)
    assert check_drift(refs, cand, crit(drift=RAW, acceptance=FIXED)) == []
    # rtol widens: 5% above the top edge of 2.0 is touching at rtol=0.05
    refs, cand = _drift_runs(np.full(50, 2.0 * 1.05))
    assert check_drift(refs, cand, crit(drift={**RAW, "rtol": 0.05}, acceptance=FIXED)) == []
    refs, cand = _drift_runs(np.full(50, 2.0 * 1.06))
    assert check_drift(refs, cand, crit(drift={**RAW, "rtol": 0.05}, acceptance=FIXED))


def test_drift_below_and_worst_step():
    loss = np.full(40, 1.5)
    loss[10:30] = 0.5
    loss[25] = 0.1
    refs, cand = _drift_runs(loss)
    (a,) = check_drift(refs, cand, crit(drift=RAW, acceptance=FIXED))
    assert a.evidence.direction == "below" and a.evidence.worst_step == 25
    assert len(a.evidence.spark.candidate) == 40


def test_drift_partial_series_only_common_steps():
    loss = np.full(100, 1.5)
    loss[60:] = 5.0
    refs, cand = _drift_runs(loss)
    live = RunRecords.from_arrays(loss=loss[:62])  # only 2 steps out so far
    assert check_drift(refs, live, crit(drift=RAW, acceptance=FIXED)) == []
    live = RunRecords.from_arrays(loss=loss[:65])
    assert check_drift(refs, live, crit(drift=RAW, acceptance=FIXED))[0].evidence.alarm_step == 64
    # a shorter reference bounds the comparison too
    short_refs = [RunRecords.from_arrays(loss=np.full(60, 1.0)), refs[1]]
    assert check_drift(short_refs, cand, crit(drift=RAW, acceptance=FIXED)) == []


def test_drift_non_contiguous_steps_align_by_step_number():
    st = np.arange(0, 200, 2)
    refs = [RunRecords.from_arrays(st, loss=np.full(100, 1.0)),
            RunRecords.from_arrays(st, loss=np.full(100, 2.0))]
    cand_steps = np.arange(0, 200)
    loss = np.full(200, 1.5)
    loss[100:] = 9.0
    (a,) = check_drift(refs, RunRecords.from_arrays(cand_steps, loss=loss), crit(drift=RAW, acceptance=FIXED))
    assert a.evidence.first_step == 100 and a.evidence.alarm_step == 108


def test_drift_another_seed_gives_no_alarm_with_defaults():
    refs = [RunRecords.from_arrays(loss=noisy(s), grad_norm=noisy(s + 10, noise=0.4)) for s in (1, 2)]
    cand = RunRecords.from_arrays(loss=noisy(3), grad_norm=noisy(13, noise=0.4))
    assert check_drift(refs, cand, DEFAULT_CRITERIA) == []


def test_drift_real_shift_found_with_defaults():
    refs = [RunRecords.from_arrays(loss=noisy(s)) for s in (1, 2)]
    cand = RunRecords.from_arrays(loss=noisy(3, scale=1.4))
    (a,) = check_drift(refs, cand, DEFAULT_CRITERIA)
    assert a.evidence.series == "loss" and a.evidence.direction == "above"


def _thinned(x: np.ndarray, every: int, phase: int = 0) -> np.ndarray:
    out = np.full_like(x, np.nan)
    out[phase::every] = x[phase::every]
    return out


def test_drift_on_a_thinned_grad_norm_is_seen():
    # The probe's own norm comes every 50th step on cheap CPU steps and every 10th on
    # torch_xla: a 4x gradient norm with the same loss must still be drift (it was not: a
    # 10-step mean over such a series is mostly empty, so no 20 steps in a row were "out").
    refs = [RunRecords.from_arrays(loss=noisy(s), grad_norm=_thinned(noisy(s + 10), 50, s))
            for s in (1, 2, 3)]
    cand = RunRecords.from_arrays(loss=noisy(4), grad_norm=_thinned(4 * noisy(14), 10))
    (a,) = check_drift(refs, cand, DEFAULT_CRITERIA)
    assert a.key == "numeric-drift:grad_norm" and a.evidence.direction == "above"
    assert a.evidence.sample_gap == 50


def test_drift_on_thinned_series_another_seed_is_quiet():
    for k in range(5):
        refs = [RunRecords.from_arrays(loss=noisy(s), grad_norm=_thinned(noisy(s + 10), 50, s))
                for s in (10 * k + 1, 10 * k + 2, 10 * k + 3)]
        cand = RunRecords.from_arrays(loss=noisy(10 * k + 4),
                                      grad_norm=_thinned(noisy(10 * k + 14), 10))
        assert check_drift(refs, cand, DEFAULT_CRITERIA) == [], k


def test_drift_ignores_series_missing_on_one_side():
    refs = [RunRecords.from_arrays(loss=np.ones(50)) for _ in range(2)]
    cand = RunRecords.from_arrays(grad_norm=np.ones(50))
    assert check_drift(refs, cand, DEFAULT_CRITERIA) == []


# --- non-finite ------------------------------------------------------------------------------


def test_nan_at_last_step_is_critical():
    ref = run(steps(30))
    cand = run(steps(30, loss=lambda i: "nan" if i == 29 else 1.0))
    alarms = run_checks([ref], cand, DEFAULT_CRITERIA, "cpu", final=True)
    (a,) = [a for a in alarms if a.kind == "non-finite"]
    assert a.severity == "critical" and a.evidence.first_step == 29
    assert a.wire["value"] == "nan" and a.evidence.last_finite_step == 28
    assert alarms[0] is a  # most severe first


def test_nonfinite_grad_norm_amp_overflow_in_refs_too_is_warning():
    ref = run(steps(30, grad_norm=lambda i: "inf" if i == 3 else 0.5))
    cand = run(steps(30, grad_norm=lambda i: "inf" if i == 7 else 0.5))
    (a,) = [a for a in run_checks([ref], cand, DEFAULT_CRITERIA, "cpu", True) if a.kind == "non-finite"]
    assert a.severity == "warning"
    clean_ref = run(steps(30))
    (a,) = [a for a in run_checks([clean_ref], cand, DEFAULT_CRITERIA, "cpu", True)
            if a.kind == "non-finite"]
    assert a.severity == "critical"


def test_null_loss_is_not_nonfinite():
    cand = run(steps(30, loss=None))
    assert "non-finite" not in kinds(run_checks([run(steps(30))], cand, DEFAULT_CRITERIA, "cpu", True))


# --- lr-schedule-changed ---------------------------------------------------------------------


def test_lr_schedule_changed_and_float_noise():
    ref = run(steps(40, lr=lambda i: [0.1 * 0.9 ** (i // 10)]))
    same = run(steps(40, lr=lambda i: [0.1 * 0.9 ** (i // 10) * (1 + 1e-9)]))
    dropped = run(steps(40, lr=lambda i: [0.1]))
    assert "lr-schedule-changed" not in kinds(run_checks([ref], same, DEFAULT_CRITERIA, "cpu", True))
    (a,) = [a for a in run_checks([ref], dropped, DEFAULT_CRITERIA, "cpu", True)
            if a.kind == "lr-schedule-changed"]
    assert a.severity == "error" and a.evidence.first_step == 10


def test_lr_different_length_alone_is_not_a_change():
    ref = run(steps(40, lr=lambda i: [0.1 / (1 + i)]))
    cand = run(steps(15, lr=lambda i: [0.1 / (1 + i)]), end=None)
    assert "lr-schedule-changed" not in kinds(run_checks([ref], cand, DEFAULT_CRITERIA, "cpu", False))


def test_lr_second_group_compared():
    ref = run(steps(20, lr=lambda i: [0.1, 0.01]))
    cand = run(steps(20, lr=lambda i: [0.1, 0.02]))
    (a,) = [a for a in run_checks([ref], cand, DEFAULT_CRITERIA, "cpu", True)
            if a.kind == "lr-schedule-changed"]
    assert a.evidence.group == 1


# --- clipping-changed ------------------------------------------------------------------------


def _clip(n: int = 50, max_norm: float | None = 1.0, grad=lambda i: 0.5 + (i % 10 == 0),
          **cols) -> list[dict]:
    return steps(n, max_norm=max_norm, grad_norm=grad, **cols)


def _clip_alarm(ref: list[dict], cand: list[dict], final: bool = True) -> Alarm | None:
    found = [a for a in run_checks([run(ref)], run(cand, end=OK if final else None),
                                   DEFAULT_CRITERIA, "cpu", final) if a.kind == "clipping-changed"]
    return found[0] if found else None


def test_clipping_same_is_quiet():
    assert _clip_alarm(_clip(), _clip()) is None


def test_clipping_max_norm_changed():
    a = _clip_alarm(_clip(), _clip(max_norm=0.05))
    assert a and a.severity == "error" and a.evidence.reason == "max_norm"
    assert a.evidence.references[0].max_norm == [1.0]
    assert a.evidence.candidate.max_norm == [0.05]
    assert a.evidence.candidate.clipped_share == 1.0


def test_clipping_removed_and_added():
    a = _clip_alarm(_clip(), _clip(max_norm=None))
    assert a and a.evidence.reason == "stopped" and a.severity == "error"
    a = _clip_alarm(_clip(max_norm=None), _clip(max_norm=1.0))
    assert a and a.evidence.reason == "started" and a.severity == "error"
    a = _clip_alarm(_clip(max_norm=None), _clip(max_norm=100.0))
    assert a and a.severity == "warning"  # never active


def test_clipping_removed_live_waits_for_enough_steps():
    assert _clip_alarm(_clip(), _clip(n=3, max_norm=None), final=False) is None
    assert _clip_alarm(_clip(), _clip(n=25, max_norm=None), final=False) is not None


@pytest.mark.parametrize("cand_every", [10, 2, 4, 3])
def test_clip_share_alone_is_no_clipping_alarm(cand_every: int):
    # reference clips 10% of steps; candidate 10%, 50%, 25%, 34% with the same max_norm: the
    # gradients changed, not the clipping code (issue 14). It was clipping-changed before.
    ref = _clip(n=100)
    cand = _clip(n=100, grad=lambda i: 0.5 + (i % cand_every == 0))
    alarms = run_checks([run(ref)], run(cand, end=OK), crit(drift={"series": ("loss",)}), "cpu",
                        True)
    assert "clipping-changed" not in kinds(alarms) and not errors(alarms)


def test_clip_share_rides_on_the_drift_alarm():
    ref = _clip(n=100)
    cand = _clip(n=100, grad=lambda i: 0.5 + (i % 2 == 0))
    alarms = run_checks([run(ref)], run(cand, end=OK), DEFAULT_CRITERIA, "cpu", True)
    drift = [a for a in alarms if a.kind == "numeric-drift"]
    assert drift and all(a.key != "numeric-drift:clip-share" for a in drift)
    assert drift[0].evidence.clip_share.candidate == 0.5
    assert "clipping-changed" not in kinds(alarms)


def test_clip_config_changes_name_their_cause():
    base = {"clip_calls": 1}
    ref = _clip(n=40, **base)
    for cand, reason in (
        (_clip(n=40, norm_type="inf", clip_calls=1), "norm_type"),
        (_clip(n=40, clip_calls=4), "calls-per-step"),
        (_clip(n=40, max_norm=None, clip_value=0.5, clip_calls=1), "value-added"),
    ):
        a = _clip_alarm(ref, cand)
        assert a and a.severity == "error" and a.evidence.reason == reason, (reason, a)
    a = _clip_alarm(_clip(n=40, max_norm=None, clip_value=0.5),
                    _clip(n=40, max_norm=None, clip_value=0.1))
    assert a and a.evidence.reason == "clip_value"


# --- goal-regression -------------------------------------------------------------------------


def _goal_run(acc: float | None) -> RunRecords:
    recs = steps(10) + ([{"type": "metric", "name": "accuracy", "value": acc}] if acc is not None else [])
    return run(recs)


GOAL = {"metric": "accuracy", "direction": "max", "tolerance": 0.5, "rtol": 0.0}


@pytest.mark.parametrize(("cand", "fires"), [(86.0, False), (85.49, True), (84.89, True), (90.0, False)])
def test_goal_regression_tolerance(cand: float, fires: bool):
    refs = [_goal_run(86.4), _goal_run(86.6)]  # mean 86.5, spread 0.2
    alarms = run_checks(refs, _goal_run(cand), crit(goal=GOAL), "cpu", True)
    assert ("goal-regression" in kinds(alarms)) is fires


def test_goal_regression_spread_and_direction():
    refs = [_goal_run(85.0), _goal_run(88.0)]  # spread 3 > tolerance
    assert "goal-regression" not in kinds(run_checks(refs, _goal_run(84.0), crit(goal=GOAL), "cpu", True))
    assert "goal-regression" in kinds(run_checks(refs, _goal_run(83.0), crit(goal=GOAL), "cpu", True))
    lower = {**GOAL, "direction": "min"}  # e.g. perplexity
    assert "goal-regression" in kinds(run_checks(refs, _goal_run(90.0), crit(goal=lower), "cpu", True))
    assert "goal-regression" not in kinds(run_checks(refs, _goal_run(83.0), crit(goal=lower), "cpu", True))


def test_goal_not_judged_live_and_missing_goal_is_no_metrics():
    refs = [_goal_run(86.4), _goal_run(86.6)]
    assert "goal-regression" not in kinds(run_checks(refs, _goal_run(10.0), crit(goal=GOAL), "cpu", False))
    alarms = run_checks(refs, _goal_run(None), crit(goal=GOAL), "cpu", True)
    assert [a.key for a in alarms if a.kind == "no-metrics"] == ["no-metrics:accuracy"]


# --- hardware --------------------------------------------------------------------------------


@pytest.mark.parametrize(("target", "facts", "expect"), [
    ("tpu", XLA_CPU_FACTS, ("wrong-hardware", "error")),
    ("tpu", TPU_FACTS, None),
    ("tpu:v5e", TPU_FACTS, None),
    ("tpu:v6e", TPU_FACTS, ("wrong-hardware", "error")),
    ("tpu:v5p", {**TPU_FACTS, "device_name": "TPU"}, ("unverified-hardware", "warning")),
    ("xla:cpu", XLA_CPU_FACTS, None),
    ("xla:cpu", CPU_FACTS, ("wrong-hardware", "error")),
    ("xla", TPU_FACTS, None),
    ("xla", CPU_FACTS, ("wrong-hardware", "error")),
    ("cpu", CPU_FACTS, None),
    ("cpu", XLA_CPU_FACTS, ("wrong-hardware", "warning")),
    ("cuda", CPU_FACTS, ("wrong-hardware", "error")),
    ("cuda", {**CPU_FACTS, "backend": "cuda", "device_kind": "CUDA", "device_name": "NVIDIA H100"}, None),
    ("tpu", {**TPU_FACTS, "device_kind": "UNKNOWN"}, ("unverified-hardware", "warning")),
])
def test_hardware(target: str, facts: dict, expect: tuple[str, str] | None):
    alarms = [a for a in run_checks([], run(steps(5), facts=facts), DEFAULT_CRITERIA, target, True)
              if "hardware" in a.kind]
    if expect is None:
        assert alarms == []
    else:
        assert [(a.kind, a.severity) for a in alarms] == [expect]
        assert alarms[0].evidence.target == target and alarms[0].evidence.real_devices is not UNSET


def test_hardware_device_count_and_no_facts():
    c = crit(hardware={"devices": 8})
    (a,) = [a for a in run_checks([], run(steps(5), facts=TPU_FACTS), c, "tpu", True) if a.kind == "wrong-hardware"]
    assert "4 device(s) seen, 8 expected" in a.title
    assert not run_checks([], run(steps(5), facts=TPU_FACTS), crit(hardware={"devices": 4}), "tpu", True)
    (a,) = run_checks([], run(steps(5), facts=None), DEFAULT_CRITERIA, "tpu", True)
    assert (a.kind, a.severity) == ("unverified-hardware", "warning")
    # live, before the first step: nothing decided yet
    assert run_checks([], run([], end=None, facts=None), DEFAULT_CRITERIA, "tpu", False) == []


def test_unknown_target_refused():
    with pytest.raises(ValueError, match="unknown target"):
        run_checks([], run(steps(1)), DEFAULT_CRITERIA, "tpu:v9", True)


# --- recompilation ---------------------------------------------------------------------------


def _compiles(counts: list[int], exit_compiles: int | None = None, causes=None) -> RunRecords:
    recs = steps(len(counts), compiles=counts, compile_s=lambda i: 0.0, backend=None)
    for i in range(1, len(counts)):
        recs[i]["compile_s"] = 0.5 * (counts[i] - counts[i - 1])
    if exit_compiles is not None:
        recs.append({"type": "exit", "compiles": exit_compiles, "compile_causes": causes or []})
    return run(recs, facts=XLA_CPU_FACTS)


def _recomp(r: RunRecords, **compile_kw) -> list[Alarm]:
    c = crit(compile=compile_kw) if compile_kw else DEFAULT_CRITERIA
    return [a for a in run_checks([], r, c, "xla:cpu", True) if a.kind == "recompilation"]


def test_recompilation_fixed_shapes_quiet_and_warmup_free():
    assert _recomp(_compiles([1, 2, 3, 3, 3, 3, 3])) == []  # steps 0-2 are warm-up


def test_recompilation_each_step_after_warmup():
    (a,) = _recomp(_compiles([1, 1, 1, 2, 3, 4, 5], exit_compiles=5, causes=["shape change"]))
    assert a.severity == "error" and a.evidence.recompiles == 4
    assert a.evidence.steps == [3, 4, 5, 6] and a.evidence.compile_s_total == 2.0
    assert a.evidence.causes == ["shape change"]


def test_recompilation_allowance():
    r = _compiles([1, 1, 1, 1, 2, 2, 3])
    assert _recomp(r, max_recompiles=2) == []
    assert _recomp(r, max_recompiles=1)[0].evidence.recompiles == 2


def test_one_burst_between_epochs_is_info_not_counted():
    # The evaluation graph compiles once between epochs (steps 0-2 warm up); nothing after.
    (a,) = _recomp(_compiles([1, 2, 2, 2, 2, 4, 4, 4, 4, 4]))
    assert a.severity == "info" and a.key == "recompilation:once"
    assert a.evidence.steps == [5] and a.evidence.clean_steps_after == 4


def test_one_burst_is_undecided_until_it_settles():
    assert _recomp(_compiles([1, 2, 2, 2, 2, 4, 4])) == []  # live: only 1 clean step after


def test_burst_that_recurs_is_counted():
    (a,) = _recomp(_compiles([1, 2, 2, 2, 2, 4, 4, 4, 4, 4, 6, 6, 6, 6]))
    assert a.severity == "error" and a.evidence.recompiles == 4
    assert a.evidence.steps == [5, 10]


def _compiles_lr(counts: list[int], lrs: list[float]) -> RunRecords:
    recs = steps(len(counts), compiles=counts, lr=[[x] for x in lrs], compile_s=0.0, backend=None)
    return run(recs, facts=XLA_CPU_FACTS)


def test_lr_leaving_one_compiles_once_and_is_explained():
    # The MNIST example's StepLR on Adadelta lr 1.0: torch_xla folds 1.0 into the graph, so the
    # first step at 0.7 compiles; the evaluation graph compiles once between epochs too. Two
    # bursts, but one has its cause on record: not a recompilation error.
    counts = [1, 2, 2, 2, 2, 3, 3, 3, 3, 3, 4, 4, 4, 4, 4]
    lrs = [1.0] * 5 + [0.7] * 10
    got = {a.key: a for a in _recomp(_compiles_lr(counts, lrs))}
    assert set(got) == {"recompilation:special-scalar", "recompilation:once"}
    assert got["recompilation:special-scalar"].severity == "info"
    assert got["recompilation:special-scalar"].evidence.steps == [5]
    assert got["recompilation:special-scalar"].evidence.lr_around == [[1.0, 0.7, 0.7]]
    assert got["recompilation:once"].evidence.steps == [10]


def test_lr_change_between_ordinary_values_explains_nothing():
    # 0.5 -> 0.25 is device data in torch_xla: a compile there is the program's own; with the
    # later burst it is two bursts, counted as before.
    counts = [1, 2, 2, 2, 2, 3, 3, 3, 3, 3, 4, 4, 4, 4, 4]
    (a,) = _recomp(_compiles_lr(counts, [0.5] * 5 + [0.25] * 10))
    assert a.severity == "error" and a.evidence.recompiles == 2


def test_compile_after_training_is_info_not_counted():
    (a,) = _recomp(_compiles([1, 1, 1, 1, 1], exit_compiles=3))
    assert a.severity == "info" and a.evidence.after_training == 2
    assert a.key == "recompilation:after-training"


def test_recompilation_absent_counts_on_cpu():
    assert _recomp(run(steps(20))) == []


# --- cpu-fallback ----------------------------------------------------------------------------


def test_cpu_fallback():
    ok = run(steps(5) + [{"type": "exit", "fallback_ops": {"aten::nonzero": 3, "aten::_local_scalar_dense": 9}}])
    assert "cpu-fallback" not in kinds(run_checks([], ok, DEFAULT_CRITERIA, "cpu", True))
    bad = run(steps(5) + [{"type": "exit", "fallback_ops": {"aten::nonzero": 3, "aten::_cdist_forward": 2}}])
    (a,) = [a for a in run_checks([], bad, DEFAULT_CRITERIA, "cpu", True) if a.kind == "cpu-fallback"]
    assert a.severity == "warning" and a.evidence.ops == {"aten::_cdist_forward": 2}


# --- how it ended ----------------------------------------------------------------------------


def test_crashed_stalled_timed_out():
    crashed = run(steps(5), end=RunEnd(exit_code=1, error_type="RuntimeError", error_message="boom"))
    (a,) = [a for a in run_checks([], crashed, DEFAULT_CRITERIA, "cpu", True) if a.kind == "crashed"]
    assert a.severity == "error" and "RuntimeError: boom" in a.title and a.evidence.last_step == 4
    stalled = run(steps(5), end=RunEnd(exit_code=-15, signal=15, stalled=True, stall_s=30.0))
    assert [a.kind for a in run_checks([], stalled, DEFAULT_CRITERIA, "cpu", True)] == ["stalled"]
    timed = run(steps(5), end=RunEnd(exit_code=-9, signal=9, timed_out=True))
    assert [a.kind for a in run_checks([], timed, DEFAULT_CRITERIA, "cpu", True)] == ["timed-out"]
    ok = run(steps(5))
    assert not {"crashed", "stalled", "timed-out"} & kinds(run_checks([], ok, DEFAULT_CRITERIA, "cpu", True))


def test_no_metrics_final_only():
    empty_ok = run([], end=OK, facts=None)
    assert [a.kind for a in run_checks([], empty_ok, DEFAULT_CRITERIA, "cpu", True)] == ["no-metrics"]
    assert run_checks([], run([], end=None, facts=None), DEFAULT_CRITERIA, "cpu", False) == []
    assert "no-metrics" not in kinds(run_checks([], run(steps(3)), DEFAULT_CRITERIA, "cpu", True))


# --- slow ------------------------------------------------------------------------------------


def test_slow():
    ref = run(steps(50, step_s=0.01))
    cand = run(steps(50, step_s=lambda i: 1.0 if i < 3 else 0.03))  # warm-up ignored
    assert "slow" not in kinds(run_checks([ref], cand, DEFAULT_CRITERIA, "cpu", True))  # 0 = off
    (a,) = [a for a in run_checks([ref], cand, crit(performance={"max_step_time_ratio": 2.0}), "cpu", True)
            if a.kind == "slow"]
    assert a.severity == "warning" and a.evidence.ratio == pytest.approx(3.0)
    assert "slow" not in kinds(run_checks([ref], cand, crit(performance={"max_step_time_ratio": 3.5}), "cpu", True))


# --- whole suite -----------------------------------------------------------------------------


def _full(seed: int, n: int = 1500, **kw) -> list[dict]:
    loss = noisy(seed, n)
    gn = noisy(seed + 50, n, noise=0.4)
    return steps(n, loss=loss, grad_norm=gn, max_norm=1.0,
                 lr=lambda i: [0.1 * 0.5 ** (i // 500)], step_s=0.02, **kw)


def test_another_seed_port_gives_no_error_alarm():
    refs = [run(_full(1)), run(_full(2))]
    for r, acc in zip(refs, (91.0, 91.4), strict=True):
        r.metrics["accuracy"] = [acc]
    cand = run(_full(3) + [{"type": "metric", "name": "accuracy", "value": 91.1}])
    c = parse_criteria('[goal]\nmetric = "accuracy"\n')
    assert errors(run_checks(refs, cand, c, "cpu", final=True)) == []
    # and live, on every prefix
    for k in (10, 100, 700):
        live = RunRecords.from_records([CPU_FACTS] + _full(3)[:k])
        assert errors(run_checks(refs, live, c, "cpu", final=False)) == []


def test_live_alarm_keys_are_stable():
    refs = [run(_full(1)), run(_full(2))]
    recs = _full(3, n=1500)
    for rec in recs[800:]:
        rec["loss"] = float(rec["loss"]) * 3
    keys = []
    for k in (900, 1200, 1500):
        live = RunRecords.from_records([CPU_FACTS] + recs[:k])
        keys.append({a.key for a in run_checks(refs, live, DEFAULT_CRITERIA, "cpu", False)})
    assert keys[0] == keys[1] == keys[2] == {"numeric-drift:loss"}


def test_alarm_json_and_helpers():
    # numpy values and NaN recorded as plain JSON (numpy unwrapped, NaN as a string)
    a = Alarm("non-finite", "critical", "t", NonFinite(value=np.float64("nan"), first_step=np.int64(3),
                                                       last_finite_value=np.float32(0.5)))
    assert a.wire == {"first_step": 3, "value": "nan", "last_finite_value": 0.5} and a.key == "non-finite"
    assert type(a.wire["first_step"]) is int
    json.dumps(a.to_dict(), allow_nan=False)
    with pytest.raises(TypeError):  # a kind's evidence is its own Struct
        Alarm("slow", "warning", "t", NonFinite())
    with pytest.raises(ValueError):
        Alarm("x", "fatal", "t")
    c = agent_claim_contradicted("all done, accuracy matches", [a])
    assert c.kind == "agent-claim-contradicted" and c.is_error and "non-finite" in c.title
    b = budget_exhausted("attempts", 10, 10)
    assert b.key == "budget-exhausted:attempts" and b.is_error
    budget = crit(budget={"max_attempts": 3, "max_cost_usd": 5.0}).budget
    assert [x.evidence.what for x in check_budget(budget, 3, 6.0, 100.0)] == ["attempts", "cost_usd"]
    assert check_budget(budget, 2, 1.0, 100.0) == []


def test_an_infinite_exit_compile_count_is_no_count() -> None:
    # Bad input from the exit record (found by the live fold's property test): int(inf)
    # raised OverflowError out of every pass of the checks.
    from portside.core.checks import Comparison, check_recompilation
    recs = [{"type": "step", "step": 0, "compiles": 0.0}, {"type": "step", "step": 1, "compiles": 0.0},
            {"type": "exit", "compiles": float("inf")}]
    assert check_recompilation(Comparison([], RunRecords.from_records(recs)),
                               DEFAULT_CRITERIA) == []
