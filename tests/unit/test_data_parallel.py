"""Issue 14's data-parallel mistakes on hand-made multi-rank records: a changed global batch
without the learning-rate change it implies (global-batch-changed), and rank losses/gradients
summed instead of averaged (rank-averaging-changed). Ground truth is built here: the global
batch is world × per-rank batch, the expected lr the reference's × the batch ratio, and a
summed gradient is the averaged one × world size."""

from __future__ import annotations

import numpy as np

from portside.core.checks import RunEnd, RunRecords, global_batch, run_checks
from portside.core.log.criteria import DEFAULT_CRITERIA

OK = RunEnd(exit_code=0, wall_s=1.0)
SAMPLES = 1024


def ddp_run(world: int = 2, per_rank: int = 32, lr: float = 0.1, epochs: int = 4,
            grad_scale: float = 1.0, seed: int = 0, gamma: float | None = None) -> list[dict]:
    """Records of a data-parallel run: every rank sees SAMPLES / world samples per epoch; loss
    and (reduced) gradient norm are functions of training progress plus seed noise, the same on
    every rank; lr a constant, or a per-epoch StepLR(gamma)."""
    rng = np.random.default_rng(seed)
    per_epoch = SAMPLES // (world * per_rank)
    out: list[dict] = []
    for rank in range(world):
        out.append({"type": "facts", "rank": rank, "backend": "cpu", "device_kind": "CPU",
                    "device_name": "cpu", "device_count": 1, "world_size": world,
                    "param_devices": ["cpu"]})
    noise = rng.standard_normal(epochs * per_epoch)
    k = 0
    for e in range(epochs):
        for b in range(per_epoch):
            prog = e + (b + 1) / per_epoch
            for rank in range(world):
                out.append({"type": "step", "rank": rank, "step": k,
                            "loss": 2.3 * np.exp(-prog) + 0.1 + 0.01 * noise[k],
                            "grad_norm": grad_scale * (1.0 + 0.3 * np.exp(-prog)
                                                       + 0.01 * noise[k]),
                            "max_norm": None, "lr": [lr * (gamma**e if gamma else 1.0)],
                            "epoch": e, "batch": b + 1, "epoch_batches": per_epoch,
                            "samples": per_rank, "step_s": 0.01})
            k += 1
    return out


def judge(cand: list[dict], refs: list[list[dict]] | None = None) -> list:
    refs = refs or [ddp_run(seed=s) for s in (0, 1, 2)]
    return run_checks([RunRecords.from_records(r, OK) for r in refs],
                      RunRecords.from_records(cand, OK), DEFAULT_CRITERIA, "cpu", True)


def kinds(alarms: list, errors: bool = True) -> set[str]:
    return {a.kind for a in alarms if a.is_error or not errors}


def test_global_batch_is_world_times_per_rank_batch():
    b = global_batch(RunRecords.from_records(ddp_run(world=2, per_rank=32), OK))
    assert b == {"global": 64.0, "world_size": 2, "per_rank": 32.0, "from": "samples"}
    assert global_batch(RunRecords.from_records(ddp_run(world=1, per_rank=48), OK))["global"] == 48


def test_steps_the_grad_scaler_skipped_do_not_change_the_global_batch():
    # fp16: a record after k skipped steps carries the samples of k + 1 batches
    run = ddp_run(world=1, per_rank=32)
    steps = [r for r in run if r["type"] == "step"]
    for r in steps[: len(steps) * 2 // 3]:
        r.update(samples=7 * 32, skipped=6)
    assert global_batch(RunRecords.from_records(run, OK))["global"] == 32


def test_same_global_batch_on_another_world_size_passes():
    alarms = judge(ddp_run(world=1, per_rank=64, seed=5))
    assert not kinds(alarms), [a.title for a in alarms]
    assert "global-batch-changed" not in kinds(alarms, errors=False)


def test_halved_global_batch_with_the_same_lr_is_flagged():
    alarms = judge(ddp_run(world=1, per_rank=32, seed=5))
    (a,) = [a for a in alarms if a.kind == "global-batch-changed"]
    assert a.is_error and "lr-schedule-changed" not in kinds(alarms)
    assert a.evidence.batch_ratio == 0.5
    assert abs(a.evidence.expected_lr[0] - 0.05) < 1e-12
    # the per-rank batch doubled on the same ranks: the same fault
    assert "global-batch-changed" in kinds(judge(ddp_run(world=2, per_rank=64, seed=5)))


def test_lr_scaled_by_the_batch_ratio_passes_and_is_reported():
    for cand, rule in ((ddp_run(world=1, per_rank=32, lr=0.05, seed=5), "linear"),
                       (ddp_run(world=2, per_rank=64, lr=0.2, seed=5), "linear"),
                       (ddp_run(world=2, per_rank=64, lr=0.1 * 2**0.5, seed=5), "sqrt")):
        alarms = judge(cand)
        assert not kinds(alarms), [a.title for a in alarms]
        (info,) = [a for a in alarms if a.kind == "global-batch-changed"]
        assert info.severity == "info" and info.evidence.rule == rule


def test_lr_scaled_by_another_factor_or_schedule_dropped_is_lr_schedule_changed():
    alarms = judge(ddp_run(world=1, per_rank=32, lr=0.02, seed=5))
    assert "lr-schedule-changed" in kinds(alarms)
    assert "global-batch-changed" not in kinds(alarms)
    # scaled right, but the reference's StepLR dropped: the scaled series is still judged
    refs = [ddp_run(seed=s, gamma=0.5) for s in (0, 1, 2)]
    assert not kinds(judge(ddp_run(world=1, per_rank=32, lr=0.05, seed=5, gamma=0.5), refs))
    alarms = judge(ddp_run(world=1, per_rank=32, lr=0.05, seed=5), refs)
    assert "lr-schedule-changed" in kinds(alarms)


def test_gradients_summed_over_ranks_are_flagged():
    alarms = judge(ddp_run(grad_scale=2.0, seed=5))
    (a,) = [a for a in alarms if a.kind == "rank-averaging-changed"]
    assert a.is_error and a.evidence.direction == "summed"
    assert abs(a.evidence.grad_norm_ratio - 2.0) < 0.1
    # the drift alarm the scaled norms cause points at it
    drift = [a for a in alarms if a.kind == "numeric-drift"]
    assert drift and all("rank-averaging-changed" in d.evidence.likely_causes for d in drift)


def test_gradients_averaged_twice_are_flagged():
    (a,) = [a for a in judge(ddp_run(grad_scale=0.5, seed=5))
            if a.kind == "rank-averaging-changed"]
    assert a.evidence.direction == "averaged-twice"


def test_correctly_averaged_and_single_process_runs_are_not_flagged():
    assert "rank-averaging-changed" not in kinds(judge(ddp_run(seed=5)), errors=False)
    # one process has no ranks to combine: a 2x gradient is drift, not rank averaging
    refs = [ddp_run(world=1, per_rank=64, seed=s) for s in (0, 1, 2)]
    alarms = judge(ddp_run(world=1, per_rank=64, grad_scale=2.0, seed=5), refs)
    assert "rank-averaging-changed" not in kinds(alarms) and "numeric-drift" in kinds(alarms)


def test_no_learning_rate_recorded_is_not_a_batch_fault():
    # a hand-written update has no optimizer: lr [] on both sides, nothing to scale
    def no_lr(run: list[dict]) -> list[dict]:
        return [{**r, "lr": []} if r["type"] == "step" else r for r in run]

    refs = [no_lr(ddp_run(seed=s)) for s in (0, 1, 2)]
    alarms = judge(no_lr(ddp_run(world=1, per_rank=32, seed=5)), refs)
    assert "global-batch-changed" not in kinds(alarms, errors=False)


def test_gradient_norm_is_not_drift_under_another_global_batch():
    # twice the batch: the noise part of the gradient norm shrinks by up to 1/sqrt(2)
    alarms = judge(ddp_run(world=2, per_rank=64, lr=0.2, grad_scale=0.7, seed=5))
    assert not kinds(alarms), [a.title for a in alarms]
    # the same global batch: the same 0.7x norm is drift
    alarms = judge(ddp_run(grad_scale=0.7, seed=5))
    assert any(a.kind == "numeric-drift" and a.evidence.series == "grad_norm" for a in alarms)
