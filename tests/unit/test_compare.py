"""The compare view's pairing of two runs (core/checks/side_by_side.py), on hand-worked cases."""

from __future__ import annotations

import math

import numpy as np

from portside.core.checks.evidence import read as read_evidence
from portside.core.checks.side_by_side import (
    StepColumns,
    alarm_step,
    differing,
    pair,
    row_of_step,
    tolerances,
)


def epoch_records(batches: int, epochs: int, loss=lambda s: 2.0 - 0.01 * s, lr: float = 0.1):
    """Step records of a loader of `batches` per epoch, as the probe writes them."""
    out, step = [], 0
    for e in range(epochs):
        for b in range(1, batches + 1):
            out.append({"type": "step", "rank": 0, "step": step, "epoch": e, "batch": b,
                        "epoch_batches": batches, "loss": loss(step), "grad_norm": 1.0,
                        "lr": [lr], "max_norm": 1.0})
            step += 1
    return out


def columns(records, lines_per_step: int = 1) -> StepColumns:
    cols = StepColumns()
    for i, r in enumerate(records):
        cols.add(r, (i + 1) * lines_per_step)
    return cols


def test_drop_last_pairs_by_progress_and_keeps_every_reference_step():
    # Reference: 10 batches an epoch; candidate (drop_last on another split): 9. By hand, the
    # candidate's batch b of an epoch sits nearest to the reference's batch round(b * 10 / 9):
    # 1 2 3 4 6 7 8 9 10 — the reference's batch 5 has no partner and stands alone.
    ref = columns(epoch_records(10, 2)).records("ref")
    cand = columns(epoch_records(9, 2)).records("cand")
    p = pair(cand, ref)
    assert p.mode == "progress"
    expected = []
    for e in range(2):
        for b in range(1, 10):
            if b == 5:
                expected.append((-1, e * 10 + 4))  # ref batch 5 (progress .5) before cand 5
            expected.append((e * 9 + b - 1, e * 10 + round(b * 10 / 9) - 1))
    assert list(zip(p.cand.tolist(), p.ref.tolist(), strict=True)) == expected
    assert len(p) == 20  # every step of both runs has a row
    # The candidate's step 12 (epoch 1, batch 4) is the row paired with the reference's step 13.
    row = row_of_step(p, cand, 12)
    assert (p.cand[row], p.ref[row]) == (12, 13)


def test_same_steps_per_epoch_pairs_by_step_number_over_the_union():
    ref = columns(epoch_records(10, 2)).records()
    cand = columns(epoch_records(10, 1)).records()  # a live candidate halfway through
    p = pair(cand, ref)
    assert p.mode == "step"
    assert p.ref.tolist() == list(range(20))
    assert p.cand.tolist() == list(range(10)) + [-1] * 10


def test_runs_without_epochs_pair_by_step():
    ref = columns([{"type": "step", "step": s, "loss": 1.0} for s in (0, 2, 4)]).records()
    cand = columns([{"type": "step", "step": s, "loss": 1.0} for s in (0, 1, 2)]).records()
    p = pair(cand, ref)
    assert p.mode == "step"
    assert list(zip(p.cand.tolist(), p.ref.tolist(), strict=True)) == [
        (0, 0), (1, -1), (2, 1), (-1, 2)]


def test_differing_marks_numbers_beyond_the_drift_tolerance_only():
    ref = columns(epoch_records(10, 1)).records()
    # loss: 3% off at step 3 (inside rtol 0.05), 20% off at step 6; lr off at step 8.
    recs = epoch_records(10, 1)
    recs[3]["loss"] *= 1.03
    recs[6]["loss"] *= 1.2
    recs[8]["lr"] = [0.05]
    recs[9]["grad_norm"] = "nan"  # the probe saw a NaN gradient norm
    cand = columns(recs).records()
    p = pair(cand, ref)
    d = differing(cand, ref, p, tolerances({"drift": {"rtol": 0.05, "atol": 1e-6}}))
    assert np.flatnonzero(d["loss"]).tolist() == [6]
    assert np.flatnonzero(d["lr"]).tolist() == [8]
    assert np.flatnonzero(d["grad_norm"]).tolist() == [9]
    assert not d["max_norm"].any()
    # A tighter tolerance from the session's criteria marks the 3% too.
    d = differing(cand, ref, p, tolerances({"drift": {"rtol": 0.01}}))
    assert np.flatnonzero(d["loss"]).tolist() == [3, 6]


def test_a_series_one_backend_does_not_report_is_not_a_difference():
    ref = columns([{"type": "step", "step": s, "loss": 1.0, "grad_norm": 2.0}
                   for s in range(3)]).records()
    cand = columns([{"type": "step", "step": s, "loss": 1.0} for s in range(3)]).records()
    d = differing(cand, ref, pair(cand, ref), tolerances(None))
    assert not d["grad_norm"].any() and not d["loss"].any()


def test_step_columns_keep_rank_zero_and_the_log_line_of_each_step():
    cols = StepColumns()
    cols.add({"type": "step", "step": 0, "rank": 0, "loss": 1.0}, 5)
    cols.add({"type": "step", "step": 0, "rank": 1, "loss": 9.0}, 6)  # another rank: not ours
    cols.add({"type": "step", "step": 1, "rank": 0, "loss": "inf", "lr": []}, 9)
    r = cols.records()
    assert r.steps.tolist() == [0, 1]
    assert r.loss[0] == 1.0 and math.isinf(r.loss[1]) and r.loss_nonfinite.tolist() == [
        False, True]
    assert math.isnan(r.lr[1])
    assert [cols.line_of(i) for i in range(len(cols))] == [5, 9]


def test_alarm_step_reads_the_first_step():
    assert alarm_step(read_evidence("numeric-drift", {"first_step": 21, "series": "loss"})) == 21
    assert alarm_step(read_evidence("non-finite", {"first_step": 4, "series": "loss"})) == 4
    assert alarm_step(read_evidence("slow", {"ratio": 1.6})) is None
    assert alarm_step(read_evidence("numeric-drift", {"first_step": True})) is None
