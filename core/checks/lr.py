"""lr-schedule-changed: the candidate's learning rate per param group against each reference's,
by step or by training progress where the steps per epoch differ."""

from __future__ import annotations

from typing import Any

import numpy as np

from portside.core.log.criteria import Criteria

from .alarms import Alarm
from .evidence import LrScheduleChanged, Spark, UnsetType
from .records import carry
from .records.comparison import Comparison, Pairing
from .records.memo import FoldKey
from .records.records import RunRecords
from .records.series import downsample

LR_RTOL = 1e-6  # float noise between schedulers computing the same lr


def _lr_by_step(p: Pairing) -> LrScheduleChanged | None:
    """First learning-rate difference at the same step index; None when they agree (or
    cannot be compared)."""
    cand, r = p.cand, p.ref
    steps, (ic, ir) = p.common
    if steps.size == 0:
        return None
    g = min(cand.lr_all.shape[1], r.lr_all.shape[1])
    c, rv = cand.lr_all[ic, :g], r.lr_all[ir, :g]
    if isinstance(ic, slice) and isinstance(ir, slice):  # the common steps are both prefixes
        # Each row's verdict is fixed once both runs have it: carried (carry.py), per
        # reference (the state is about that very run).
        st = carry.folded(cand, FoldKey("lr_by_step", (p.index, g)),
                          lambda: {"both": False, "bad": 0, "first": None},
                          lambda st, src, a, b: _lr_rows(st, src, r, g, a, b), n=steps.size,
                          of=(r,))
        if not st["both"] or st["first"] is None:
            return None
        i, grp = st["first"]
        return _lr_found(i, grp, st["bad"], steps, c, rv, cand, r, "step")
    both = np.isfinite(c) & np.isfinite(rv)
    if not both.any():
        return None
    return _lr_evidence(_lr_differs(c, rv, both), steps, c, rv, rv, cand, r, "step")


def _lr_differs(c: np.ndarray, rv: np.ndarray, both: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return both & (np.abs(c - rv) > LR_RTOL * np.maximum(np.abs(c), np.abs(rv)) + 1e-12)


def _lr_rows(st: dict[str, Any], cand: RunRecords, r: RunRecords, g: int, a: int,
             b: int) -> dict[str, Any]:
    c, rv = cand.lr_all[a:b, :g], r.lr_all[a:b, :g]
    both = np.isfinite(c) & np.isfinite(rv)
    bad = _lr_differs(c, rv, both)
    rows = bad.any(axis=1)
    out = {**st, "both": st["both"] or bool(both.any()), "bad": st["bad"] + int(rows.sum())}
    if out["first"] is None and rows.any():
        i = int(np.argmax(rows))
        out["first"] = (a + i, int(np.argmax(bad[i])))
    return out


def _lr_by_progress(p: Pairing) -> LrScheduleChanged | None:
    """The same by training progress: the candidate's lr must lie within the reference's at
    the nearest-progress step and its two neighbours (a per-step schedule sampled at 62
    instead of 63 points per epoch falls between the reference's values)."""
    cand, r, m = p.cand, p.ref, p.progress_map
    ok = m >= 0
    if not ok.any():
        return None
    g = min(cand.lr_all.shape[1], r.lr_all.shape[1])
    j = m[ok]
    c = cand.lr_all[ok, :g]
    lo = hi = r.lr_all[j, :g]
    for d in (-1, 1):
        nb = r.lr_all[np.clip(j + d, 0, r.n - 1), :g]
        lo, hi = np.fmin(lo, nb), np.fmax(hi, nb)
    both = np.isfinite(c) & np.isfinite(lo)
    if not both.any():
        return None
    # Widened by the reference's own change over those steps: a schedule sampled at other
    # points (a peak between two of the reference's steps, warmup counted in steps) stays in;
    # a constant stretch (a per-epoch schedule inside an epoch) is compared exactly.
    tol = LR_RTOL * np.maximum(np.abs(lo), np.abs(hi)) + 1e-12 + (hi - lo)
    with np.errstate(invalid="ignore"):
        diff = both & ((c < lo - tol) | (c > hi + tol))
    return _lr_evidence(diff, cand.steps[ok], c, r.lr_all[j, :g], lo, cand, r, "progress")


def _lr_evidence(diff: np.ndarray, steps: np.ndarray, c: np.ndarray, rv: np.ndarray,
                 _lo: np.ndarray, cand: RunRecords, r: RunRecords,
                 mode: str) -> LrScheduleChanged | None:
    bad_rows = diff.any(axis=1)
    if not bad_rows.any():
        return None
    i = int(np.argmax(bad_rows))
    return _lr_found(i, int(np.argmax(diff[i])), int(bad_rows.sum()), steps, c, rv, cand, r,
                     mode)


def _lr_found(i: int, grp: int, n_bad: int, steps: np.ndarray, c: np.ndarray, rv: np.ndarray,
              cand: RunRecords, r: RunRecords, mode: str) -> LrScheduleChanged:
    return LrScheduleChanged(
        first_step=int(steps[i]), group=grp,
        candidate_lr=float(c[i, grp]), reference_lr=float(rv[i, grp]),
        steps_differing=n_bad, steps_compared=int(steps.size),
        groups=[int(cand.lr_all.shape[1]), int(r.lr_all.shape[1])], aligned_by=mode,
        scheduler_steps=[_last_finite(cand.col("sched_steps")),
                         _last_finite(r.col("sched_steps"))],
        spark=Spark(steps=downsample(steps), candidate=downsample(c[:, 0]),
                    reference=downsample(rv[:, 0])))


def _last_finite(x: np.ndarray) -> float:
    fin = x[np.isfinite(x)]
    return float(fin[-1]) if fin.size else 0.0


def check_lr(c: Comparison, criteria: Criteria) -> list[Alarm]:
    """The candidate's learning rates differ (beyond float noise) from every reference's, both
    at the same step index and at the same training progress (when the probe recorded epochs):
    a schedule that is the same function of steps, or of progress, passes. Series lengths alone
    are not compared: a short candidate is partial or crashed."""
    if not c.refs or c.cand.n == 0:
        return []
    best: LrScheduleChanged | None = None
    for p in c.pairings:
        by_step = _lr_by_step(p)
        if by_step is None:
            return []  # matches at least one reference (or nothing to compare)
        if p.progress_known:
            by_prog = _lr_by_progress(p)
            if by_prog is None:
                return []
            by_step = by_prog if p.per_epoch_differs else by_step
        if best is None:
            best = by_step
    assert best is not None
    assert not isinstance(best.scheduler_steps, UnsetType)
    sc, sr = best.scheduler_steps
    why = ""
    if sc == 0 and sr > 1:
        why = f" (candidate steps no LR scheduler; reference stepped one {sr:g} times)"
    return [Alarm("lr-schedule-changed", "error",
                  f"learning rate differs from step {best.first_step}: "
                  f"{best.candidate_lr:.6g} vs reference {best.reference_lr:.6g}{why}",
                  best, key="lr-schedule-changed")]
