"""global-batch-changed: the global batch (samples per optimizer step over all ranks) differs
from the reference's and the learning rate does not follow it.

The rule: a port that changes world size × per-rank batch (× micro-batches per step) must
scale the learning rate by the batch ratio k = candidate / reference — linearly (Goyal et al.'s
rule for SGD) or by √k (the usual rule for Adam-style optimisers). Judged on the whole lr series
(aligned by training progress), so a scaled lr with another schedule still fails:
- k = 1 (also a world-size change that the per-rank batch compensates): the plain lr check.
- the lr is the reference's unchanged: error `global-batch-changed` — the batch changed without
  the lr change it implies.
- the lr is the reference's × k or × √k: info `global-batch-changed`, not judged; the scaled
  series must still match the reference's schedule.
- anything else: `lr-schedule-changed`, with the global batches as evidence.
With another global batch the gradient norm is not compared for drift (`drift_criteria`): its
noise part scales with 1/√batch by construction. The loss and the goal still are: a scaled lr
is the rule, not a proof that training converges the same (early steps of a large batch often
do not, hence warmup), and the consequences are judged as for any port.
"""

from __future__ import annotations

import dataclasses as dc
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from portside.core.log.criteria import Criteria

from .alarms import Alarm
from .lr import check_lr
from .records import RunRecords

if TYPE_CHECKING:
    from .comparison import Comparison

BATCH_RTOL = 0.02  # medians of whole batches: only a real change moves them


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


def check_lr_batch(c: Comparison) -> list[Alarm]:
    """`check_lr`, with the learning rate judged relative to the global batch (module doc)."""
    plain = check_lr(c)
    if c.batch is None:
        return plain
    k, cb, rb = c.batch
    ev = {"candidate_batch": cb, "reference_batch": rb, "batch_ratio": k}
    lr0, cand = _first_lr(c.refs), c.cand
    if not (math.isfinite(lr0) and np.isfinite(cand.lr).any()):
        return plain  # no learning rate recorded (a hand-written update): nothing to scale
    if not plain:
        return [Alarm(
            "global-batch-changed", "error",
            f"global batch {_fmt(cb)} vs reference {_fmt(rb)} with the same learning rate "
            f"{lr0:.6g}{_warmup(c.refs)}: scaling by the batch ratio expects {lr0 * k:.6g} "
            f"(√ rule: {lr0 * math.sqrt(k):.6g})",
            {**ev, "lr": lr0, "expected_lr": [lr0 * k, lr0 * math.sqrt(k)]},
            key="global-batch-changed")]
    for rule, f in (("linear", k), ("sqrt", math.sqrt(k))):
        if not check_lr(c.scaled_lr(f)):
            return [Alarm(
                "global-batch-changed", "info",
                f"global batch {_fmt(cb)} vs reference {_fmt(rb)}, learning rate scaled by "
                f"{f:.4g} ({rule} rule): compared as scaled",
                {**ev, "rule": rule, "lr_factor": f}, key="global-batch-changed")]
    return [dc.replace(a, evidence={**a.evidence, **ev, "expected_lr_factor": [k, math.sqrt(k)]})
            for a in plain]


def batch_ratio(refs: list[RunRecords], cand: RunRecords) -> tuple[float, dict, dict] | None:
    """(candidate / reference global batch, both batches) when they differ; else None. The
    DataLoader's figure where every run has one, else the batch the steps consumed (the two
    are not mixed: a loss over tokens consumes batch × sequence rows)."""
    for column in ("samples", "consumed"):
        cb = global_batch(cand, column)
        rbs = [b for r in refs if r.n and (b := global_batch(r, column)) is not None]
        if cb is not None and len(rbs) == sum(1 for r in refs if r.n) and rbs:
            break
    else:
        return None
    rb = rbs[0]
    k = cb["global"] / rb["global"]
    if abs(k - 1.0) <= BATCH_RTOL:
        return None
    return k, cb, rb


def _first_lr(refs: list[RunRecords]) -> float:
    """The reference's learning rate to quote: its first, or its peak under a warm-up from 0
    (0 scales to 0: "the same learning rate 0" would say nothing)."""
    for r in refs:
        v = r.lr[np.isfinite(r.lr)]
        if v.size:
            return float(v.max() if v[0] == 0 else v[0])
    return math.nan


def _warmup(refs: list[RunRecords]) -> str:
    r = next((r for r in refs if np.isfinite(r.lr).any()), None)
    return " (peak, after a warm-up from 0)" if r is not None and r.lr[np.isfinite(r.lr)][0] == 0 \
        else ""


def _fmt(b: dict[str, Any]) -> str:
    return f"{b['global']:g} ({b['world_size']} rank(s) × {b['per_rank']:g})"


def drift_criteria(c: Comparison, criteria: Criteria) -> Criteria:
    """The drift criteria without `grad_norm` when the global batch differs (module doc)."""
    series = criteria.drift.series
    if "grad_norm" not in series or c.batch is None:
        return criteria
    kept = tuple(s for s in series if s != "grad_norm")
    return dc.replace(criteria, drift=dc.replace(criteria.drift, series=kept))
