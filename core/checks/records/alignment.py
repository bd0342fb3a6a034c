"""Lining runs up: by training progress instead of raw step index where that is the same point
of training.

A correct port may take a different number of optimizer steps per epoch than its reference
(`drop_last=True` for XLA's static shapes, another per-device batch, world size, gradient
accumulation, fp16 steps the GradScaler skipped). Comparing step k with step k then compares
different points of training: a per-epoch schedule steps "earlier" in the one with fewer steps.

Progress of a step = epoch + (batches of the epoch consumed at the step) / (batches in the
epoch), from the probe's `epoch`, `batch`, `epoch_batches`. A candidate step is matched to the
reference step of the same epoch with the nearest progress. Runs without that information, or
with the same steps per epoch, are aligned by step index as before.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .facts import has_progress, progress, steps_per_epoch
from .records import RunRecords
from .series import common_steps


@dataclass(frozen=True)
class Alignment:
    mode: str  # "step" | "progress"
    steps: np.ndarray  # candidate step numbers of the compared points (for evidence)
    sel: list[slice | np.ndarray]  # candidate's selector first, then one per reference


def by_progress(cand: RunRecords, refs: list[RunRecords]) -> bool:
    """Runs line up by training progress: every one reports it and the steps per epoch
    differ (`differs`); else by step index. The one statement of that rule: the checks ask it
    once per pass (comparison.py), the side-by-side view per pair of runs."""
    return bool(refs) and has_progress(cand) and all(has_progress(r) for r in refs) and \
        differs(cand, refs)


def differs(cand: RunRecords, refs: list[RunRecords]) -> bool:
    """Batches per epoch differ (known from the first step), or steps per epoch differ on an
    epoch complete in both runs (gradient accumulation). Steps the GradScaler skipped count
    as steps here: the k-th update of both runs is the same point of training, so such runs are
    compared by step index (updates), not progress."""
    c = steps_per_epoch(cand, attempted=True)
    if not c:
        return False
    nb = cand.col("epoch_batches")[0]
    for r in refs:
        if r.n and r.col("epoch_batches")[0] != nb:
            return True
        rs = steps_per_epoch(r, attempted=True)
        last_c, last_r = max(c), max(rs, default=None)
        if any(c[e] != rs[e] for e in c if e in rs and e != last_c and e != last_r):
            return True
    return False


def map_to(cand: RunRecords, ref: RunRecords) -> np.ndarray:
    """For each candidate step record, the index of the reference step record of the same
    epoch with the nearest progress; -1 where the reference has no such epoch."""
    pc, pr = progress(cand), progress(ref)
    ec = cand.col("epoch").astype(np.int64)
    er = ref.col("epoch").astype(np.int64)
    if not (np.all(np.diff(pr) >= 0)):
        order = np.argsort(pr, kind="stable")
        pr, er = pr[order], er[order]
    else:
        order = None
    j = np.searchsorted(pr, pc)
    lo = np.clip(j - 1, 0, max(pr.size - 1, 0))
    hi = np.clip(j, 0, max(pr.size - 1, 0))
    if pr.size == 0:
        return np.full(cand.n, -1, np.int64)
    ok_lo = er[lo] == ec
    ok_hi = er[hi] == ec
    d_lo = np.where(ok_lo, np.abs(pc - pr[lo]), np.inf)
    d_hi = np.where(ok_hi, np.abs(pr[hi] - pc), np.inf)
    pick = np.where(d_hi < d_lo, hi, lo)
    out = np.where(ok_lo | ok_hi, pick, -1)
    if order is not None:
        out = np.where(out >= 0, order[np.maximum(out, 0)], -1)
    return out.astype(np.int64)


def aligned(cand: RunRecords, refs: list[RunRecords], progress: bool,
            maps: list[np.ndarray]) -> Alignment:
    """The compared points: by progress (`maps`: map_to of each reference), else by step."""
    if progress:
        ok = np.ones(cand.n, bool)
        for m in maps:
            ok &= m >= 0
        idx = np.flatnonzero(ok)
        return Alignment("progress", cand.steps[idx], [idx, *[m[idx] for m in maps]])
    steps, sel = common_steps([cand, *refs])
    return Alignment("step", steps, sel)
