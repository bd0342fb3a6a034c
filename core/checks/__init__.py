"""Checks: reference runs' records + candidate run's records + criteria → alarms.

Pure functions, numpy-vectorised, no I/O. `run_checks` is safe on partial series: with
`final=False` (a live candidate) it raises only what is already decided — drift and learning
rates over the steps present in every run (aligned by training progress when the steps per
epoch differ: see progress.py), non-finite values, hardware from the facts, compile
counts so far — and leaves end-of-run verdicts (no-metrics, goal-regression) for `final=True`.
Call it again as records arrive and dedupe by `Alarm.key`.
"""

from __future__ import annotations

import dataclasses as dc

from portside.core.checks.acceptance import check_goal_stat
from portside.core.log.criteria import Criteria

from .alarms import (
    KINDS,
    SEVERITIES,
    Alarm,
    Finding,
    agent_claim_contradicted,
    budget_exhausted,
    check_budget,
    jsonable,
    sort_alarms,
)
from .batch import check_lr_batch, drift_criteria, global_batch
from .clipping import check_clipping, clip_share
from .data import check_data
from .drift import check_drift
from .evidence import check_evidence
from .goal import check_goal
from .lr import check_lr
from .memory import check_memory
from .nonfinite import check_nonfinite
from .optimizer import check_optimizer
from .precision import check_precision
from .progress import check_step_count
from .ranks import check_rank_average, check_ranks
from .records import RunEnd, RunRecords, to_float
from .runtime import (
    TARGETS,
    check_end,
    check_fallback,
    check_hardware,
    check_recompilation,
    device_facts,
    validate_target,
)
from .slow import check_slow, steady_step_s

__all__ = [
    "KINDS", "SEVERITIES", "TARGETS", "Alarm", "Finding", "RunEnd", "RunRecords",
    "agent_claim_contradicted", "budget_exhausted", "check_budget", "check_clipping",
    "check_data", "check_drift", "check_end", "check_evidence", "check_fallback", "check_goal", "check_hardware", "check_lr",
    "check_lr_batch", "check_nonfinite", "check_optimizer", "check_precision",
    "check_rank_average", "check_ranks",
    "check_recompilation", "check_slow", "check_step_count", "device_facts", "global_batch",
    "jsonable", "run_checks", "sort_alarms", "steady_step_s", "to_float", "validate_target",
]


def run_checks(references: list[RunRecords], candidate: RunRecords, criteria: Criteria,
               target: str, final: bool) -> list[Alarm]:
    """Every check on the candidate; most severe first. Raises ValueError on an unknown target."""
    validate_target(target)
    refs = [r for r in references if r.n > 0]  # a reference without steps gives no envelope
    alarms: list[Alarm] = []
    alarms += check_evidence(refs, candidate)
    alarms += check_end(references, candidate, criteria, final)
    alarms += check_nonfinite(refs, candidate)
    alarms += check_hardware(candidate, criteria, target, final)
    drift = check_drift(refs, candidate, drift_criteria(refs, candidate, criteria))
    causes = check_lr_batch(refs, candidate) + check_clipping(refs, candidate, criteria, final)
    causes += check_rank_average(refs, candidate)
    # Settings facts before their effects: the drift they cause points at them.
    causes += check_optimizer(refs, candidate, criteria, final)
    causes += check_data(refs, candidate, criteria)
    causes += check_precision(refs, candidate, criteria)
    diverged = check_ranks(refs, candidate)
    if diverged:  # never reduced at all: that is the cause, not where the clipping sits
        causes = [a for a in causes if a.evidence.get("reason") != "before-reduction"]
    causes += diverged
    alarms += causes
    alarms += check_recompilation(candidate, criteria)
    alarms += check_fallback(candidate, criteria)
    alarms += check_slow(refs, candidate, criteria, final)
    alarms += check_memory(candidate, criteria) if final else []
    alarms += check_step_count(refs, candidate, final)
    share = clip_share(refs, candidate)
    if final:
        drift += check_goal_stat(references, candidate, criteria)  # the stated test
    # Consequences point at their likely causes; a clip-rate change with the same clip
    # configuration is evidence on the drift alarm, never a clipping alarm of its own.
    named = sorted({a.kind for a in causes if a.is_error})
    extra: dict = {}
    if named:
        extra["likely_causes"] = named
    if share is not None and share["differs"]:
        extra["clip_share"] = share
    drift = [dc.replace(a, evidence={**a.evidence, **extra}) if extra else a for a in drift]
    alarms += drift
    return sort_alarms(alarms)
