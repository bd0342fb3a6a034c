"""step-count-differs (info): the candidate takes another number of optimizer steps than the
references, per epoch or in total, and is compared by training progress (records/alignment.py)
rather than judged for it."""

from __future__ import annotations

import numpy as np

from portside.core.log.criteria import Criteria

from .alarms import Alarm
from .evidence import StepCountDiffers
from .records.comparison import Comparison
from .records.facts import steps_per_epoch
from .records.records import RunRecords


def check_step_count(c: Comparison, criteria: Criteria) -> list[Alarm]:
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
    c_per, r_per = _first(per_c), _first(per_r)
    ev = StepCountDiffers(
        candidate_steps=cand.n, reference_steps=totals, aligned_by=by,
        candidate_steps_per_epoch=c_per, reference_steps_per_epoch=r_per,
        candidate_batches_per_epoch=_col0(cand, "epoch_batches"),
        reference_batches_per_epoch=_col0(refs[0], "epoch_batches"),
        candidate_samples_per_step=_col0(cand, "samples"),
        reference_samples_per_step=_col0(refs[0], "samples"),
        candidate_world_size=cand.world_size, reference_world_size=refs[0].world_size,
        skipped=[float(np.nansum(cand.col("skipped"))),
                 float(np.nansum(refs[0].col("skipped")))])
    per = f" ({c_per} vs {r_per} per epoch)" if c_per and r_per else ""
    return [Alarm("step-count-differs", "info",
                  f"{cand.n} optimizer steps vs reference {'/'.join(map(str, totals))}{per}: "
                  f"compared by {'training progress' if by == 'progress' else 'step index'}",
                  ev, key="step-count-differs")]


def _first(per: dict[int, int]) -> int | None:
    return per[min(per)] if per else None


def _col0(r: RunRecords, name: str) -> float | None:
    v = r.col(name)
    return float(v[0]) if v.size and np.isfinite(v[0]) else None
