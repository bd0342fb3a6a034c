"""Aligning runs by training progress instead of raw step index.

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
from typing import TYPE_CHECKING, Any

import numpy as np

from . import carry
from .alarms import Alarm
from .memo import FoldKey
from .records import RunRecords

if TYPE_CHECKING:
    from .comparison import Comparison


@dataclass(frozen=True)
class Alignment:
    mode: str  # "step" | "progress"
    steps: np.ndarray  # candidate step numbers of the compared points (for evidence)
    sel: list[slice | np.ndarray]  # candidate's selector first, then one per reference


def has_progress(r: RunRecords) -> bool:
    return r.has("epoch") and r.has("batch") and r.has("epoch_batches")


def progress(r: RunRecords) -> np.ndarray:
    """epoch + fraction of the epoch consumed, per step record (NaN without the columns)."""
    val = r.derived.progress
    if val is None:
        with np.errstate(invalid="ignore", divide="ignore"):
            val = r.col("epoch") + r.col("batch") / np.maximum(r.col("epoch_batches"), 1)
        r.derived.progress = val
    return val


def steps_per_epoch(r: RunRecords, attempted: bool = False) -> dict[int, int]:
    """Step records per epoch (the last one may be partial in a live run); with `attempted`,
    plus the steps the GradScaler skipped (they consumed batches but updated nothing)."""
    val = r.derived.steps_per_epoch.get(attempted)
    if val is None:
        val = r.derived.steps_per_epoch[attempted] = _steps_per_epoch(r, attempted)
    return val


def _steps_per_epoch(r: RunRecords, attempted: bool) -> dict[int, int]:
    if not has_progress(r):
        return {}
    st = carry.folded(r, FoldKey("steps_per_epoch", attempted), dict,
                      lambda st, src, a, b: _fold_epochs(st, src, a, b, attempted))
    if st is carry.OFF:  # weights a sum in pieces might round otherwise: all at once
        st = _fold_epochs({}, r, 0, r.n, attempted, whole=True)
    out = {int(e): int(round(c)) for e, c in st.items()}
    return out if list(out) == sorted(out) else dict(sorted(out.items()))


# Weights (1 + skipped) that are integers this small sum exactly in any grouping.
_EXACT = 2.0 ** 20


def _fold_epochs(st: Any, src: RunRecords, a: int, b: int, attempted: bool,
                 whole: bool = False) -> Any:
    """Step records (or attempted steps) per epoch over rows a..b-1, added to st."""
    ep = src.col("epoch")[a:b].astype(np.int64)
    w = np.nan_to_num(src.col("skipped")[a:b]) + 1 if attempted else None
    if w is not None and not whole and not (
            np.all(np.abs(w) <= _EXACT) and np.all(w == np.floor(w))):
        return carry.OFF
    if ep.size and bool((ep[1:] >= ep[:-1]).all()):  # the usual order: runs, no hashing
        starts = np.flatnonzero(np.concatenate(([True], ep[1:] != ep[:-1])))
        uniq = ep[starts]
        counts = (np.diff(np.append(starts, ep.size)).astype(np.float64) if w is None
                  else np.add.reduceat(w, starts))
    else:
        uniq, inv = np.unique(ep, return_inverse=True)
        counts = np.bincount(inv, weights=w)
    for e, c in zip(uniq.tolist(), counts.tolist(), strict=True):
        st[e] = st.get(e, 0.0) + c
    return st


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


def align(cand: RunRecords, refs: list[RunRecords], common_steps: object) -> Alignment:
    """By progress when every run reports it and the steps per epoch differ; else by step."""
    by = by_progress(cand, refs)
    return aligned(cand, refs, by, [map_to(cand, r) for r in refs] if by else [], common_steps)


def aligned(cand: RunRecords, refs: list[RunRecords], progress: bool, maps: list[np.ndarray],
            common_steps: object) -> Alignment:
    """The compared points: by progress (`maps`: map_to of each reference), else by step."""
    if progress:
        ok = np.ones(cand.n, bool)
        for m in maps:
            ok &= m >= 0
        idx = np.flatnonzero(ok)
        return Alignment("progress", cand.steps[idx], [idx, *[m[idx] for m in maps]])
    steps, sel = common_steps([cand, *refs])  # type: ignore[operator]
    return Alignment("step", steps, sel)


def check_step_count(c: Comparison) -> list[Alarm]:
    """Info: the candidate takes another number of optimizer steps than the references (per
    epoch, or in total) and is therefore compared by progress, not judged for it."""
    refs, cand = c.refs, c.cand
    if not c.final or not refs or cand.n == 0:
        return []
    totals = sorted({r.n for r in refs})
    per_c = steps_per_epoch(cand)
    per_r = steps_per_epoch(refs[0])
    if cand.n in totals and per_c == per_r:
        return []
    by = "progress" if c.by_progress else "step"
    ev: dict[str, Any] = {
        "candidate_steps": cand.n, "reference_steps": totals, "aligned_by": by,
        "candidate_steps_per_epoch": _first(per_c), "reference_steps_per_epoch": _first(per_r),
        "candidate_batches_per_epoch": _col0(cand, "epoch_batches"),
        "reference_batches_per_epoch": _col0(refs[0], "epoch_batches"),
        "candidate_samples_per_step": _col0(cand, "samples"),
        "reference_samples_per_step": _col0(refs[0], "samples"),
        "candidate_world_size": cand.world_size, "reference_world_size": refs[0].world_size,
        "skipped": [float(np.nansum(cand.col("skipped"))),
                    float(np.nansum(refs[0].col("skipped")))],
    }
    per = ""
    if ev["candidate_steps_per_epoch"] and ev["reference_steps_per_epoch"]:
        per = (f" ({ev['candidate_steps_per_epoch']} vs {ev['reference_steps_per_epoch']} per "
               "epoch)")
    return [Alarm("step-count-differs", "info",
                  f"{cand.n} optimizer steps vs reference {'/'.join(map(str, totals))}{per}: "
                  f"compared by {'training progress' if by == 'progress' else 'step index'}",
                  ev, key="step-count-differs")]


def _first(per: dict[int, int]) -> int | None:
    return per[min(per)] if per else None


def _col0(r: RunRecords, name: str) -> float | None:
    v = r.col(name)
    return float(v[0]) if v.size and np.isfinite(v[0]) else None
