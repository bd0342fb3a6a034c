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
With another global batch the gradient norm is not compared for drift (drift.py): its
noise part scales with 1/√batch by construction. The loss and the goal still are: a scaled lr
is the rule, not a proof that training converges the same (early steps of a large batch often
do not, hence warmup), and the consequences are judged as for any port.
"""

from __future__ import annotations

import dataclasses as dc
import math
from typing import Any

import msgspec
import numpy as np

from portside.core.log.criteria import Criteria

from .alarms import Alarm
from .evidence import GlobalBatch, GlobalBatchChanged, LrScheduleChanged
from .lr import check_lr
from .records.comparison import Comparison
from .records.records import RunRecords


def check_lr_batch(c: Comparison, criteria: Criteria) -> list[Alarm]:
    """`check_lr`, with the learning rate judged relative to the global batch (module doc)."""
    plain = check_lr(c, criteria)
    if c.batch is None:
        return plain
    k, cb, rb = c.batch
    cand_batch, ref_batch = _batch(cb), _batch(rb)
    lr0, cand = _first_lr(c.refs), c.cand
    if not (math.isfinite(lr0) and np.isfinite(cand.lr).any()):
        return plain  # no learning rate recorded (a hand-written update): nothing to scale
    if not plain:
        return [Alarm(
            "global-batch-changed", "error",
            f"global batch {_fmt(cb)} vs reference {_fmt(rb)} with the same learning rate "
            f"{lr0:.6g}{_warmup(c.refs)}: scaling by the batch ratio expects {lr0 * k:.6g} "
            f"(√ rule: {lr0 * math.sqrt(k):.6g})",
            GlobalBatchChanged(candidate_batch=cand_batch, reference_batch=ref_batch,
                               batch_ratio=k, lr=lr0, expected_lr=[lr0 * k, lr0 * math.sqrt(k)]),
            key="global-batch-changed")]
    for rule, f in (("linear", k), ("sqrt", math.sqrt(k))):
        if not check_lr(c.scaled_lr(f), criteria):
            return [Alarm(
                "global-batch-changed", "info",
                f"global batch {_fmt(cb)} vs reference {_fmt(rb)}, learning rate scaled by "
                f"{f:.4g} ({rule} rule): compared as scaled",
                GlobalBatchChanged(candidate_batch=cand_batch, reference_batch=ref_batch,
                                   batch_ratio=k, rule=rule, lr_factor=f),
                key="global-batch-changed")]
    return [_with_batches(a, cand_batch, ref_batch, k) for a in plain]


def _with_batches(a: Alarm, cand: GlobalBatch, ref: GlobalBatch, k: float) -> Alarm:
    """An lr-schedule-changed alarm with the global batches as evidence, and the lr factors
    they imply (linear, √)."""
    assert isinstance(a.evidence, LrScheduleChanged)
    return dc.replace(a, evidence=msgspec.structs.replace(
        a.evidence, candidate_batch=cand, reference_batch=ref, batch_ratio=k,
        expected_lr_factor=[k, math.sqrt(k)]))


def _batch(b: dict[str, Any]) -> GlobalBatch:
    """records/facts.py's global batch, as evidence."""
    return GlobalBatch(global_=b["global"], world_size=b["world_size"], per_rank=b["per_rank"],
                       from_=b["from"])


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

