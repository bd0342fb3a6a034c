"""goal-regression by the practical rule: the candidate's goal metric worse than the tolerance
and the references' spread (the stated test is acceptance.py's)."""

from __future__ import annotations

import math

import numpy as np

from portside.core.log.criteria import Criteria

from .alarms import Alarm
from .evidence import GoalRegression
from .records.records import RunRecords


def goal_values(refs: list[RunRecords], cand: RunRecords, criteria: Criteria
                ) -> tuple[list[float], float] | None:
    """The references' finite last goal values and the candidate's last one; None when the
    criteria name no goal metric or either side has no value (both goal rules start here)."""
    g = criteria.goal
    if not g.metric:
        return None
    ref_vals = [v for r in refs if (v := r.last_metric(g.metric)) is not None and math.isfinite(v)]
    c = cand.last_metric(g.metric)
    if not ref_vals or c is None:
        return None
    return ref_vals, c


def check_goal(refs: list[RunRecords], cand: RunRecords, criteria: Criteria) -> list[Alarm]:
    """Last goal value worse than the reference mean by more than the tolerance (the larger of
    `tolerance` and `rtol`·|mean|) and more than the references' spread (max − min)."""
    got = goal_values(refs, cand, criteria)
    if got is None:
        return []
    ref_vals, c = got
    g = criteria.goal
    mean = float(np.mean(ref_vals))
    spread = float(max(ref_vals) - min(ref_vals))
    tol = max(g.tolerance, g.rtol * abs(mean))
    worse = (mean - c) if g.direction == "max" else (c - mean)
    if math.isfinite(c) and not (worse > tol and worse > spread):
        return []
    return [Alarm("goal-regression", "error",
                  f"{g.metric} {c:.6g} vs reference mean {mean:.6g} "
                  f"({'lower' if g.direction == 'max' else 'higher'} is worse)",
                  GoalRegression(metric=g.metric, candidate=c, references=ref_vals, mean=mean,
                                 spread=spread, tolerance=tol, worse_by=worse,
                                 direction=g.direction),
                  key=f"goal-regression:{g.metric}")]
