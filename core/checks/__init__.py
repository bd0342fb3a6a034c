"""Checks: reference runs' records + candidate run's records + criteria → alarms.

Pure functions, numpy-vectorised, no I/O. `run_checks` is safe on partial series: with
`final=False` (a live candidate) it raises only what is already decided — drift and learning
rates over the steps present in every run, non-finite values, hardware from the facts, compile
counts so far — and leaves end-of-run verdicts (no-metrics, goal-regression) for `final=True`.
Call it again as records arrive and dedupe by `Alarm.key`.
"""

from __future__ import annotations

from ..criteria import Criteria
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
from .numeric import (
    check_clipping,
    check_drift,
    check_goal,
    check_lr,
    check_nonfinite,
    check_slow,
    steady_step_s,
)
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

__all__ = [
    "KINDS", "SEVERITIES", "TARGETS", "Alarm", "Finding", "RunEnd", "RunRecords",
    "agent_claim_contradicted", "budget_exhausted", "check_budget", "check_clipping",
    "check_drift", "check_end", "check_fallback", "check_goal", "check_hardware", "check_lr",
    "check_nonfinite", "check_recompilation", "check_slow", "device_facts", "jsonable",
    "run_checks", "sort_alarms", "steady_step_s", "to_float", "validate_target",
]


def run_checks(references: list[RunRecords], candidate: RunRecords, criteria: Criteria,
               target: str, final: bool) -> list[Alarm]:
    """Every check on the candidate; most severe first. Raises ValueError on an unknown target."""
    validate_target(target)
    refs = [r for r in references if r.n > 0]  # a reference without steps gives no envelope
    alarms: list[Alarm] = []
    alarms += check_end(references, candidate, criteria, final)
    alarms += check_nonfinite(refs, candidate)
    alarms += check_hardware(candidate, criteria, target, final)
    alarms += check_drift(refs, candidate, criteria)
    alarms += check_lr(refs, candidate)
    alarms += check_clipping(refs, candidate, criteria, final)
    alarms += check_recompilation(candidate, criteria)
    alarms += check_fallback(candidate, criteria)
    alarms += check_slow(refs, candidate, criteria, final)
    if final:
        alarms += check_goal(references, candidate, criteria)
    return sort_alarms(alarms)
