"""Issue 14 on hand-made records: alignment by training progress, clip configuration vs clip
rate, multi-rank records. Ground truth: the schedules are computed here from their
definitions (a per-epoch StepLR is gamma**epoch), independent of the checks."""

from __future__ import annotations

import numpy as np

from portside.core.checks import RunEnd, RunRecords, run_checks
from portside.core.log.criteria import DEFAULT_CRITERIA

OK = RunEnd(exit_code=0, wall_s=1.0)
FACTS = {"type": "facts", "backend": "cpu", "device_kind": "CPU", "device_name": "cpu",
         "device_count": 1, "world_size": 1, "param_devices": ["cpu"]}


def mnist_like(per_epoch: int, epochs: int = 14, seed: int = 0, gamma: float | None = 0.7,
               batch: int = 64) -> list[dict]:
    """The issue's case: per-epoch StepLR(gamma); loss a function of progress plus noise."""
    rng = np.random.default_rng(seed)
    out = [dict(FACTS)]
    k = 0
    for e in range(epochs):
        for b in range(per_epoch):
            prog = e + (b + 1) / per_epoch
            out.append({"type": "step", "step": k, "loss": 2.3 * np.exp(-prog / 3) + 0.1
                        + 0.02 * rng.standard_normal(), "grad_norm": 0.5 + 0.01 * rng.random(),
                        "max_norm": None, "lr": [1.0 * (gamma**e if gamma else 1.0)],
                        "epoch": e, "batch": b + 1, "epoch_batches": per_epoch,
                        "samples": batch, "step_s": 0.01})
            k += 1
    return out


def judge(refs: list[list[dict]], cand: list[dict]) -> list:
    return run_checks([RunRecords.from_records(r, OK) for r in refs],
                      RunRecords.from_records(cand, OK), DEFAULT_CRITERIA, "cpu", True)


REFS = [mnist_like(63, seed=s) for s in (0, 1, 2)]


def test_drop_last_with_per_epoch_steplr_passes():
    # 63 optimizer steps per epoch in the reference, 62 with drop_last: by raw step index the
    # schedule steps one step earlier ("lr differs from step 62: 0.7 vs 1"); by progress not.
    alarms = judge(REFS, mnist_like(62, seed=5))
    assert not [a for a in alarms if a.is_error], [a.title for a in alarms]
    (info,) = [a for a in alarms if a.kind == "step-count-differs"]
    assert info.severity == "info" and info.evidence.aligned_by == "progress"
    assert (info.evidence.candidate_steps_per_epoch, info.evidence.reference_steps_per_epoch) \
        == (62, 63)


def test_drop_last_with_the_schedule_dropped_fails():
    alarms = judge(REFS, mnist_like(62, seed=5, gamma=None))
    (lr,) = [a for a in alarms if a.kind == "lr-schedule-changed"]
    assert lr.is_error and lr.evidence.aligned_by == "progress"
    # epoch 1 from step 62; its first step is within the boundary's tolerance (the reference's
    # neighbour there is the last step of epoch 0), the second is not
    assert lr.evidence.first_step == 63
    assert lr.evidence.steps_differing >= 12 * 61
    assert lr.evidence.candidate_lr == 1.0 and lr.evidence.reference_lr == 0.7


def test_other_gamma_fails_and_same_steps_compare_by_index():
    alarms = judge(REFS, mnist_like(63, seed=5, gamma=0.5))
    (lr,) = [a for a in alarms if a.kind == "lr-schedule-changed"]
    assert lr.evidence.aligned_by == "step" and lr.evidence.first_step == 63
    assert not [a for a in alarms if a.kind == "step-count-differs"]


def test_per_step_schedule_sampled_at_other_points_passes():
    # OneCycle-like lr(progress) sampled 62 vs 63 times per epoch: values fall between the
    # reference's neighbours, including at the peak.
    def cyc(per_epoch: int, seed: int) -> list[dict]:
        recs = mnist_like(per_epoch, epochs=4, seed=seed)
        for r in recs[1:]:
            f = (r["epoch"] + r["batch"] / per_epoch) / 4
            r["lr"] = [0.5 * (1 - np.cos(2 * np.pi * f)) + 1e-3]
        return recs
    alarms = judge([cyc(63, s) for s in (0, 1, 2)], cyc(62, 5))
    assert not [a for a in alarms if a.kind == "lr-schedule-changed"]


def test_skipped_steps_align_by_updates_not_progress():
    # fp16: the reference's scaler skipped 6 steps of epoch 0; the bf16 port skips none. The
    # k-th update is the same point of training: compared by step index.
    ref = mnist_like(30, epochs=4)
    del ref[1:7]
    for i, r in enumerate(ref[1:]):
        r["step"] = i
    ref[1]["skipped"] = 6
    cand = mnist_like(30, epochs=4, seed=3)
    alarms = judge([ref], cand)
    (info,) = [a for a in alarms if a.kind == "step-count-differs"]
    assert info.evidence.aligned_by == "step" and info.evidence.skipped == [0.0, 6.0]


# --- multi-rank ------------------------------------------------------------------------------


def ranked(world: int = 2, n: int = 40, diverge: bool = False, local_clip: bool = False,
           reduced_flag: bool = True) -> list[dict]:
    out = []
    for rank in range(world):
        out.append({**FACTS, "rank": rank, "world_size": world})
        for k in range(n):
            norm = 2.0 + 0.01 * k + (0.3 * rank if local_clip else 0.0)
            rec = {"type": "step", "rank": rank, "step": k, "loss": 1.0 - 0.01 * k,
                   "grad_norm": norm, "max_norm": 1.0, "lr": [0.1], "clip_calls": 1,
                   "clip_reduced": reduced_flag}
            if k % 10 == 0:
                rec["param_sum"] = 12.0 + 0.1 * k + (0.01 * k * rank if diverge else 0.0)
            out.append(rec)
    return out


def test_records_merge_ranks():
    r = RunRecords.from_records(ranked(world=3), OK)
    assert r.n == 40 and sorted(r.ranks) == [0, 1, 2] and r.world_size == 3
    assert r.facts["rank"] == 0 and sorted(r.rank_facts) == [0, 1, 2]
    assert r.has("clip_reduced") and r.col("clip_reduced")[0] == 1.0


def test_correct_data_parallel_port_passes():
    assert not [a for a in judge([ranked()], ranked()) if a.is_error]


def test_parameters_apart_across_ranks_is_ranks_diverged():
    alarms = judge([ranked()], ranked(diverge=True))
    (a,) = [a for a in alarms if a.kind == "ranks-diverged"]
    assert a.is_error and a.evidence.first_step == 10 and a.evidence.ranks == [0, 1]
    # never reduced, also clipped unreduced: the cause is the missing reduction, live too
    cand = RunRecords.from_records(ranked(diverge=True, reduced_flag=False, n=25), None)
    live = run_checks([RunRecords.from_records(ranked(), OK)], cand, DEFAULT_CRITERIA, "cpu",
                      False)
    assert {a.kind for a in live if a.is_error} == {"ranks-diverged"}


def test_clipping_before_the_reduction_is_clipping_changed():
    # structural: the probe saw no reduction before the clip
    (a,) = [a for a in judge([ranked()], ranked(reduced_flag=False))
            if a.kind == "clipping-changed"]
    assert a.evidence.reason == "before-reduction" and "reference clips after" in a.title
    # from the data alone (xmp-style: no flag): per-rank norms differ, the reference's agree
    cand = [dict(r) for r in ranked(local_clip=True)]
    for r in cand:
        r.pop("clip_reduced", None)
    (a,) = [a for a in judge([ranked()], cand) if a.kind == "clipping-changed"]
    assert a.evidence.reason == "before-reduction"
    assert a.evidence.candidate.rank_spread > 0.1


def test_rank_device_count_across_ranks():
    from portside.core.log.criteria import parse_criteria

    crit = parse_criteria("[hardware]\ndevices = 4\n")
    alarms = run_checks([], RunRecords.from_records(ranked(world=2), OK), crit, "cpu", True)
    (a,) = [a for a in alarms if a.kind == "wrong-hardware"]
    assert "2 device(s) seen, 4 expected" in a.title and a.evidence.rank_devices
