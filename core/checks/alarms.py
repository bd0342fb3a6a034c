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
keep the newest alarm per key and raise each key once. `evidence` is the kind's own Struct
(evidence.py: EVIDENCE); `wire` is what the log and the store keep of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from portside.core.log import events as ev

from .evidence import (
    EVIDENCE,
    UNSET,
    AlarmRef,
    BudgetExhausted,
    ClaimContradicted,
    Evidence,
    OpenAlarm,
    to_wire,
)

SEVERITIES = ev.SEVERITIES  # one severity table: core/log/events.py
SEVERITY_RANK = ev.SEVERITY_RANK

KINDS = ev.ALARM_KINDS
#: Alarms a reviewer cannot override: the evidence they would be weighed against is forged.
UNOVERRIDABLE = frozenset({"evidence-tampered"})


@dataclass(frozen=True, eq=False)
class Alarm:
    """`evidence` is the kind's own Struct (evidence.EVIDENCE); as bare Evidence, none."""
    kind: str
    severity: str
    title: str
    evidence: Evidence = field(default_factory=Evidence)
    key: str = ""

    def __post_init__(self) -> None:
        if self.severity not in SEVERITY_RANK:
            raise ValueError(f"bad severity {self.severity!r}")
        if self.kind not in KINDS:  # keeps KINDS the true list of what the checks raise
            raise ValueError(f"alarm kind {self.kind!r} is not in KINDS")
        if type(self.evidence) not in (EVIDENCE[self.kind], Evidence):
            raise TypeError(f"{self.kind} evidence is {EVIDENCE[self.kind].__name__}, not "
                            f"{type(self.evidence).__name__}")
        if not self.key:
            object.__setattr__(self, "key", self.kind)

    @cached_property
    def wire(self) -> dict[str, Any]:
        """The evidence as the log and the store keep it (evidence.to_wire)."""
        return to_wire(self.evidence)

    def __eq__(self, other: object) -> bool:  # as recorded: NaN equals NaN
        return isinstance(other, Alarm) and self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]

    @property
    def is_error(self) -> bool:
        """error or critical: fails the attempt."""
        return SEVERITY_RANK[self.severity] >= SEVERITY_RANK["error"]

    def raised(self, session_id: str, run_id: str = "") -> ev.AlarmRaised:
        """The event that records this alarm (the one builder of ``alarm.raised``)."""
        return ev.AlarmRaised(session_id=session_id, alarm_id=ev.new_id("al-"), check=self.kind,
                              severity=self.severity,  # type: ignore[arg-type]
                              title=self.title, evidence=self.wire, run_id=run_id)

    def updated(self, session_id: str, alarm_id: str, step: int | None) -> ev.AlarmUpdated:
        """The event that records this alarm's newer evidence (the one builder of
        ``alarm.updated``; when one is due: checks/refresh.py)."""
        return ev.AlarmUpdated(session_id=session_id, alarm_id=alarm_id, title=self.title,
                               evidence=self.wire, step=step)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "severity": self.severity, "title": self.title,
                "evidence": self.wire, "key": self.key}


def sort_alarms(alarms: list[Alarm]) -> list[Alarm]:
    """Most severe first; check order otherwise."""
    return sorted(alarms, key=lambda a: -SEVERITY_RANK[a.severity])


def agent_claim_contradicted(claim: str, contradicted_by: list[Alarm] | None = None,
                             reason: str = "", *, severity: str = "error", at: str = "",
                             open_alarms: list[tuple[str, str]] | None = None) -> Alarm:
    """The agent says it is done while the checks say otherwise (raised by the session engine;
    critical where the claim is judged against open alarms: `at` says where, `open_alarms`
    (check, title) which)."""
    by = contradicted_by or []
    why = reason or ", ".join(sorted({a.kind for a in by})) or "the checks"
    opened = None if open_alarms is None else [OpenAlarm(check=c, title=t) for c, t in open_alarms]
    return Alarm("agent-claim-contradicted", severity,
                 f"agent claims success, contradicted by {why}",
                 ClaimContradicted(
                     claim=claim[:2000], reason=reason,
                     alarms=[AlarmRef(kind=a.kind, severity=a.severity, title=a.title, key=a.key)
                             for a in by],
                     at=at or UNSET, open_alarms=UNSET if opened is None else opened),
                 key="agent-claim-contradicted")


def budget_exhausted(what: str, used: float, limit: float) -> Alarm:
    """A stopping criterion was reached (`what`: attempts | cost_usd | human_minutes)."""
    return Alarm("budget-exhausted", "error", f"budget exhausted: {what} {used:g} of {limit:g}",
                 BudgetExhausted(what=what, used=used, limit=limit),
                 key=f"budget-exhausted:{what}")


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
