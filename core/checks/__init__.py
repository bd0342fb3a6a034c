"""Checks: reference runs' records + candidate run's records + criteria → alarms.

Pure functions, numpy-vectorised, no I/O. Two floors: `records/` holds what every check
reads (runs as arrays, one run's facts and memo, the pass's `Comparison` of the runs) and
judges nothing; every other module here is a check, a function of (Comparison, Criteria) ->
list[Alarm], or part of the pass around them. A pass (checklist.py) lines the runs up once
(records/comparison.py), runs the `CHECKS` in order on that, then links consequences to their
causes (causes.py). The import contract "inside checks" (pyproject.toml) keeps that order.
An alarm's evidence is its kind's Struct (evidence.py, the floor under the alarm); the card,
the headless summary and the report show it through one `describe` (describe.py).

`run_checks` is safe on partial series: with `final=False` (a live candidate) it raises only
what is already decided — drift and learning rates over the steps present in every run
(aligned by training progress when the steps per epoch differ: records/alignment.py),
non-finite values, hardware from the facts, compile counts so far — and leaves end-of-run
verdicts (no-metrics, goal-regression) for `final=True`. Call it again as records arrive and
dedupe by `Alarm.key`.
"""

from __future__ import annotations

from .alarms import (
    KINDS,
    SEVERITIES,
    Alarm,
    agent_claim_contradicted,
    budget_exhausted,
    check_budget,
    sort_alarms,
)
from .batch import check_lr_batch
from .checklist import CHECKS, Check, run_checks
from .clipping import check_clipping, clip_share
from .data import check_data
from .drift import check_drift, drift_criteria
from .evidence import EVIDENCE, Evidence, jsonable, to_wire
from .evidence import read as read_evidence
from .goal import check_goal
from .integrity import check_integrity
from .lr import check_lr
from .nonfinite import check_nonfinite
from .optimizer import check_optimizer
from .precision import check_precision
from .ranks import check_rank_average, check_ranks
from .records.comparison import Comparison
from .records.facts import global_batch
from .records.records import RunEnd, RunRecords, to_float
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
from .step_count import check_step_count

__all__ = [
    "CHECKS", "EVIDENCE", "KINDS", "SEVERITIES", "TARGETS", "Alarm", "Check", "Comparison", "Evidence",
    "RunEnd", "RunRecords", "clip_share", "drift_criteria",
    "agent_claim_contradicted", "budget_exhausted", "check_budget", "check_clipping",
    "check_data", "check_drift", "check_end", "check_fallback", "check_goal", "check_hardware",
    "check_integrity", "check_lr",
    "check_lr_batch", "check_nonfinite", "check_optimizer", "check_precision",
    "check_rank_average", "check_ranks",
    "check_recompilation", "check_slow", "check_step_count", "device_facts", "global_batch",
    "jsonable", "read_evidence", "run_checks", "sort_alarms", "steady_step_s", "to_float", "to_wire", "validate_target",
]
