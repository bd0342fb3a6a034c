"""Facts of one run alone that the alignment and the checks read: its training progress, its
steps per epoch, its global batch. Each is computed at most once per run (kept in its memo,
memo.py) and, where it folds row by row, carried from one live pass to the next (carry.py).

Progress of a step = epoch + (batches of the epoch consumed at the step) / (batches in the
epoch), from the probe's `epoch`, `batch`, `epoch_batches` (alignment.py lines runs up by it).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import carry
from .memo import FoldKey
from .records import RunRecords


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


def global_batch(r: RunRecords, column: str = "samples") -> dict[str, Any] | None:
    """Samples per optimizer step summed over the ranks (each rank's median, so a short last
    batch does not count; steps the GradScaler skipped count as steps), with world size and
    per-rank batch; None without that column. `samples`: what the DataLoader yielded;
    `consumed`: the leading dimension of the step's loss input (the probe's first steps), for
    runs that index their tensors themselves."""
    memo = r.derived.global_batch
    if column not in memo:
        memo[column] = _global_batch(r, column)
    return memo[column]


BATCH_PREFIX = 4096  # steps per rank the batch is read from: it is configuration, set at start


def _global_batch(r: RunRecords, column: str) -> dict[str, Any] | None:
    def med(x: RunRecords) -> float | None:
        # A record after GradScaler-skipped steps carries their batches too: per update. Only
        # the first BATCH_PREFIX steps: the median there already leaves out an epoch's short
        # last batch, and a live pass at 1M steps x 8 ranks must not sort every rank's column.
        samples, skipped = x.extra.get(column), x.extra.get("skipped")
        if samples is None:
            return None
        s = samples[:BATCH_PREFIX]
        if skipped is not None:
            s = s / (1.0 + np.nan_to_num(skipped[:BATCH_PREFIX]))
        s = s[np.isfinite(s) & (s > 0)]
        return float(np.median(s)) if s.size else None

    per = {k: med(x) for k, x in r.ranks.items()} if r.ranks else {0: med(r)}
    if any(v is None for v in per.values()):
        return None
    world = r.world_size
    total = sum(v for v in per.values() if v is not None)
    if len(per) < world:  # ranks not (yet) reporting: assume they take the same batch
        total *= world / len(per)
    return {"global": total, "world_size": world, "per_rank": per[min(per)], "from": column}
