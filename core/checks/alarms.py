"""Alarms: what a check found, with evidence a reviewer can judge, and a stable key.

Severities (why each is what it is):
- critical — `non-finite` loss: the run is numerically broken from that step on;
  `evidence-tampered`: the run's records are not what its probe wrote, or its facts are not
  what its processes did (checks/integrity.py). It cannot be overridden: no record of such a run
  is a basis for a pass.
- error — anything that makes the port wrong even when the run exits 0: `numeric-drift`,
  `goal-regression`, `clipping-changed`, `lr-schedule-changed`, `wrong-hardware`,
  `recompilation`, `crashed`, `stalled`, `timed-out`, `no-metrics`, `agent-claim-contradicted`,
  `budget-exhausted`. An error-level alarm on an exit-0 run makes the attempt `failed-silent`.
- warning — worth a look, not a verdict: `cpu-fallback` (slow, not wrong), `slow`,
  `unverified-hardware`, clipping that starts but never clips, a non-finite gradient norm that
  the references have too (fp16 loss-scaler overflow steps) while the loss stays finite.
- info — reported, not counted: compilations after the last training step (evaluation),
  `step-count-differs` (another number of optimizer steps, compared by progress).
  `ranks-diverged` (error): the ranks' parameters differ, gradients were not reduced.
  `rank-averaging-changed` (error): gradients W× (or 1/W×) the reference's, W the world size:
  rank losses/gradients summed instead of averaged, or averaged twice.
  `global-batch-changed`: error when the global batch (world size × per-rank batch) changed
  and the learning rate did not; info when the lr was scaled by the batch ratio (or its √).
  `optimizer-changed`, `data-changed`, `precision-changed`: a setting the run trained with
  (the probe's facts) differs from the references'; error, info where `settings.allow` lists
  it (checks/optimizer.py, data.py, precision.py).
  `too-few-references` (warning; info where no number of references would do): the goal test
  over these references cannot detect a change of the goal's tolerance (checks/acceptance.py
  says how many would, or asks for a larger tolerance or a more stable metric).

`key` is stable across incremental calls (kind plus the series or aspect), so a live caller can
keep the newest alarm per key and raise each key once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from portside.core.log import events as ev

SEVERITIES = ev.SEVERITIES  # one severity table: core/log/events.py
SEVERITY_RANK = ev.SEVERITY_RANK

KINDS = ev.ALARM_KINDS
#: Alarms a reviewer cannot override: the evidence they would be weighed against is forged.
UNOVERRIDABLE = frozenset({"evidence-tampered"})


@dataclass(frozen=True)
class Alarm:
    kind: str
    severity: str
    title: str
    evidence: dict[str, Any] = field(default_factory=dict)
    key: str = ""

    def __post_init__(self) -> None:
        if self.severity not in SEVERITY_RANK:
            raise ValueError(f"bad severity {self.severity!r}")
        if self.kind not in KINDS:  # keeps KINDS the true list of what the checks raise
            raise ValueError(f"alarm kind {self.kind!r} is not in KINDS")
        if not self.key:
            object.__setattr__(self, "key", self.kind)
        object.__setattr__(self, "evidence", jsonable(self.evidence))

    @property
    def is_error(self) -> bool:
        """error or critical: fails the attempt."""
        return SEVERITY_RANK[self.severity] >= SEVERITY_RANK["error"]

    def raised(self, session_id: str, run_id: str = "") -> ev.AlarmRaised:
        """The event that records this alarm (the one builder of ``alarm.raised``)."""
        return ev.AlarmRaised(session_id=session_id, alarm_id=ev.new_id("al-"), check=self.kind,
                              severity=self.severity,  # type: ignore[arg-type]
                              title=self.title, evidence=self.evidence, run_id=run_id)

    def updated(self, session_id: str, alarm_id: str, step: int | None) -> ev.AlarmUpdated:
        """The event that records this alarm's newer evidence (the one builder of
        ``alarm.updated``; when one is due: checks/refresh.py)."""
        return ev.AlarmUpdated(session_id=session_id, alarm_id=alarm_id, title=self.title,
                               evidence=self.evidence, step=step)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "severity": self.severity, "title": self.title,
                "evidence": self.evidence, "key": self.key}


def jsonable(obj: Any) -> Any:
    """Plain JSON types only: numpy scalars/arrays unwrapped, NaN/±inf as strings."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [jsonable(v) for v in obj.tolist()]
    if isinstance(obj, np.bool_ | bool):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating | float):
        f = float(obj)
        if math.isnan(f):
            return "nan"
        if math.isinf(f):
            return "inf" if f > 0 else "-inf"
        return f
    return obj


def sort_alarms(alarms: list[Alarm]) -> list[Alarm]:
    """Most severe first; check order otherwise."""
    return sorted(alarms, key=lambda a: -SEVERITY_RANK[a.severity])


def agent_claim_contradicted(claim: str, contradicted_by: list[Alarm] | None = None,
                             reason: str = "") -> Alarm:
    """The agent says it is done while the checks say otherwise (raised by the session engine)."""
    by = contradicted_by or []
    why = reason or ", ".join(sorted({a.kind for a in by})) or "the checks"
    return Alarm("agent-claim-contradicted", "error",
                 f"agent claims success, contradicted by {why}",
                 {"claim": claim[:2000], "reason": reason,
                  "alarms": [{"kind": a.kind, "severity": a.severity, "title": a.title, "key": a.key}
                             for a in by]},
                 key="agent-claim-contradicted")


def budget_exhausted(what: str, used: float, limit: float) -> Alarm:
    """A stopping criterion was reached (`what`: attempts | cost_usd | human_minutes)."""
    return Alarm("budget-exhausted", "error", f"budget exhausted: {what} {used:g} of {limit:g}",
                 {"what": what, "used": used, "limit": limit}, key=f"budget-exhausted:{what}")


def check_budget(budget: Any, attempts: int, cost_usd: float, human_minutes: float) -> list[Alarm]:
    """Alarms for every limit of `criteria.budget` reached (0 = no limit)."""
    out = []
    if budget.max_attempts and attempts >= budget.max_attempts:
        out.append(budget_exhausted("attempts", attempts, budget.max_attempts))
    if budget.max_cost_usd and cost_usd >= budget.max_cost_usd:
        out.append(budget_exhausted("cost_usd", cost_usd, budget.max_cost_usd))
    if budget.max_human_minutes and human_minutes >= budget.max_human_minutes:
        out.append(budget_exhausted("human_minutes", human_minutes, budget.max_human_minutes))
    return out
