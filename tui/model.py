"""What the screen knows, folded from the event log. No Textual here.

Live and replay feed the same events through :meth:`SessionModel.apply`; the widgets read the
model. Keeping the fold apart from the widgets means a replayed session is rendered from exactly
the state a live one had.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field
from typing import Any

from portside.core.checks.evidence import Evidence, read
from portside.core.checks.side_by_side import StepColumns
from portside.core.log import events as ev
from portside.core.log.ledger import LEDGER_KINDS, AlarmEntry, Ledger

from .linestore import LineStore

# larger: the candidate attempt's few steps at a bigger size ([larger] criteria)
ROLE_LABELS = {"reference": "ref", "candidate": "cand", "larger": "larger"}


@dataclass
class RunView:
    run_id: str
    role: str
    attempt: int
    command: str
    target: str
    started_at: float
    lines: LineStore = field(default_factory=LineStore)
    finished: ev.RunFinished | None = None
    last_step: dict[str, Any] = field(default_factory=dict)
    first_step_t: float | None = None
    last_step_t: float | None = None
    steps_seen: int = 0
    facts: dict[str, Any] | None = None
    lines_elided: bool = False  # a replay seek loaded only the log's tail: the count is a floor
    # Step series for the envelope chart: compact arrays, one entry per step record.
    step_ids: array = field(default_factory=lambda: array("d"))
    losses: array = field(default_factory=lambda: array("d"))
    grad_norms: array = field(default_factory=lambda: array("d"))
    table: StepColumns = field(default_factory=StepColumns)  # main rank, for the compare view
    version: int = 0  # bumped on every change, so widgets redraw only what moved
    reused_from: dict[str, Any] = field(default_factory=dict)  # a stored reference, not run

    @property
    def label(self) -> str:
        return f"{ROLE_LABELS.get(self.role, 'cand')}#{self.attempt}"

    @property
    def running(self) -> bool:
        return self.finished is None

    @property
    def mark(self) -> str:
        if self.finished is None:
            return "●"
        done = "✓" if self.finished.outcome == "passed" else "✖"
        return done + "↺" if self.reused_from else done

    def steps_per_s(self) -> float | None:
        step_s = self.last_step.get("step_s")
        if isinstance(step_s, int | float) and step_s > 0:
            return 1.0 / step_s
        return None

    def status_line(self, now: float) -> str:
        s = self.last_step
        parts = [f"{self.label} {self.mark} {self.finished.outcome if self.finished else 'running'}"]
        if "step" in s:
            parts.append(f"step {s['step']}")
        loss = _num(s.get("loss"))
        if loss is not None:
            parts.append(f"loss {loss:.4g}")
        rate = self.steps_per_s()
        if rate is not None:
            parts.append(f"{rate:.3g} it/s")
        if s.get("compiles") is not None:
            parts.append(f"compiles {s['compiles']}")
        end = self.started_at + self.finished.wall_s if self.finished else now
        parts.append(f"{_clock(max(0.0, end - self.started_at))}")
        parts.append(f"{len(self.lines):,}{'+' if self.lines_elided else ''} lines")
        return " · ".join(parts)


@dataclass
class AlarmView:
    event: ev.AlarmRaised
    acknowledged: bool = False
    cleared: bool = False
    localized: ev.AlarmLocalized | None = None  # where the runs first part (core/localize/traces.py)
    entry: AlarmEntry | None = None  # the model's ledger's fact: its newest title and evidence
    _typed: tuple[object, Evidence] | None = field(default=None, repr=False, compare=False)

    @property
    def rank(self) -> int:
        return ev.SEVERITY_RANK.get(self.event.severity, 0)

    @property
    def title(self) -> str:
        """As the evidence now stands (``alarm.updated``, folded by the ledger)."""
        return self.entry.title if self.entry is not None else self.event.title

    @property
    def evidence(self) -> dict[str, Any]:
        """As recorded (the log's dict)."""
        return self.entry.evidence if self.entry is not None else self.event.evidence

    @property
    def typed(self) -> Evidence:
        """The evidence as its kind's Struct (checks/evidence.py), read once per update."""
        stored = self.evidence
        if self._typed is None or self._typed[0] is not stored:
            self._typed = (stored, read(self.event.check, stored))
        return self._typed[1]

    @property
    def evidence_step(self) -> int | None:
        """The candidate step of the newest evidence; None while it is as raised."""
        return self.entry.evidence_step if self.entry is not None else None


@dataclass
class EditView:
    event: ev.EditProposed
    decided: ev.EditDecided | None = None
    applied: bool = False

    @property
    def status(self) -> str:
        if self.decided is None:
            return "awaiting review"
        return self.decided.decision + (" · applied" if self.applied else "")


@dataclass
class CommandView:
    """A command proposal (``command.proposed``, or an older log's ``$ cwd`` edit form)."""

    event: ev.CommandProposed
    decided: ev.EditDecided | None = None

    @property
    def status(self) -> str:
        return "awaiting review" if self.decided is None else self.decided.decision


class SessionModel:
    def __init__(self, info: dict[str, Any] | None = None) -> None:
        self.info: dict[str, Any] = dict(info or {})
        self.session_id: str = str(self.info.get("session_id") or "")
        self.started_at: float | None = self.info.get("started_at")
        self.ended: ev.SessionEnded | None = None
        self.state = "starting"
        self.state_detail = ""
        self.runs: dict[str, RunView] = {}
        self.alarms: dict[str, AlarmView] = {}
        self.edits: dict[str, EditView] = {}  # file edits only
        self.commands: dict[str, CommandView] = {}
        self.interventions: list[ev.Intervention] = []  # every one, review notes too (shown)
        self.claim: ev.AgentClaimed | None = None
        self.ledger = Ledger()  # the header's numbers: what counts is decided there, once

    # --- the fold ----------------------------------------------------------------------------

    def apply(self, e: ev.Event) -> None:
        self.session_id = self.session_id or e.session_id
        if e.__struct_config__.tag in LEDGER_KINDS:
            self.ledger.apply(e)
        match e:
            case ev.SessionStarted():
                self.started_at = self.started_at or e.ts
                for key in ("project", "target", "agent", "title", "mode", "criteria"):
                    self.info.setdefault(key, getattr(e, key))
                self.state = "running"
            case ev.SessionState():
                self.state, self.state_detail = e.state, e.detail
            case ev.SessionEnded():
                self.ended = e
                self.state = f"ended · {e.verdict}"
            case ev.AgentClaimed():
                self.claim = e
            case ev.CommandProposed() | ev.EditProposed() if (cmd := ev.as_command(e)) is not None:
                self.commands[cmd.command_id] = CommandView(cmd)
            case ev.EditProposed():
                self.edits[e.edit_id] = EditView(e)
            case ev.EditDecided() if e.edit_id in self.commands:
                self.commands[e.edit_id].decided = e
            case ev.EditDecided() if e.edit_id in self.edits:
                self.edits[e.edit_id].decided = e
            case ev.EditApplied() if e.edit_id in self.edits:
                self.edits[e.edit_id].applied = True
            case ev.RunStarted():
                self.runs[e.run_id] = RunView(e.run_id, e.role, e.attempt, e.command, e.target, e.ts,
                                              reused_from=dict(e.reused_from))
            case ev.RunOutput() if e.run_id in self.runs:
                run = self.runs[e.run_id]
                run.lines.extend(e.lines)
                run.version += 1
            case ev.RunRecord() if e.run_id in self.runs:
                self._records(self.runs[e.run_id], e.records)
            case ev.RunFinished() if e.run_id in self.runs:
                self.runs[e.run_id].finished = e
                self.runs[e.run_id].version += 1
            case ev.AlarmRaised():
                self.alarms[e.alarm_id] = AlarmView(e, entry=self.ledger.alarms.get(e.alarm_id))
            case ev.AlarmAcknowledged() if e.alarm_id in self.alarms:
                self.alarms[e.alarm_id].acknowledged = True
            case ev.AlarmCleared() if e.alarm_id in self.alarms:
                self.alarms[e.alarm_id].cleared = True
            case ev.AlarmLocalized() if e.alarm_id in self.alarms:
                self.alarms[e.alarm_id].localized = e
            case ev.Intervention():
                self.interventions.append(e)

    def _records(self, run: RunView, records: list[dict[str, Any]]) -> None:
        for r in records:
            kind = r.get("type")
            if kind == "step":
                run.last_step = r
                run.steps_seen += 1
                t = _num(r.get("t"))
                if t is not None:
                    run.first_step_t = run.first_step_t or t
                    run.last_step_t = t
                step = _num(r.get("step"))
                run.step_ids.append(step if step is not None else float(run.steps_seen - 1))
                run.losses.append(_num(r.get("loss"), math.nan))
                run.grad_norms.append(_num(r.get("grad_norm"), math.nan))
                run.table.add(r, len(run.lines))
            elif kind == "facts":
                run.facts = r
        run.version += 1

    # --- what the header and panels ask ------------------------------------------------------

    def elapsed(self, now: float) -> float:
        if self.started_at is None:
            return 0.0
        end = self.ended.ts if self.ended else now
        return max(0.0, end - self.started_at)

    def attempts(self) -> int:
        return max((r.attempt for r in self.runs.values() if r.role == "candidate"), default=0)

    def max_attempts(self) -> int | None:
        crit = self.info.get("criteria")
        budget = (crit.get("budget") if isinstance(crit, dict) else None) or {}
        value = budget.get("max_attempts") if isinstance(budget, dict) else None
        return int(value) if isinstance(value, int | float) and value > 0 else None

    @property
    def token_usd(self) -> float:
        return self.ledger.token_usd

    def compute_usd(self) -> float:
        """Finished runs priced from their device facts with the session's recorded prices."""
        return self.ledger.compute_usd

    def human_minutes(self) -> float:
        return self.ledger.human_minutes

    def open_alarms(self) -> list[AlarmView]:
        """Not cleared, most severe first, then oldest."""
        live = [a for a in self.alarms.values() if not a.cleared]
        return sorted(live, key=lambda a: (-a.rank, a.event.seq))

    def sorted_alarms(self) -> list[AlarmView]:
        """Every alarm, open ones first, by severity."""
        return sorted(self.alarms.values(), key=lambda a: (a.cleared, -a.rank, a.event.seq))

    def running_run(self, prefer: str | None = None) -> RunView | None:
        """The run to abort: ``prefer`` when it is running, else the newest running one."""
        if prefer and prefer in self.runs and self.runs[prefer].running:
            return self.runs[prefer]
        running = [r for r in self.runs.values() if r.running]
        return running[-1] if running else None

    def pending_edits(self) -> list[EditView]:
        return [e for e in self.edits.values() if e.decided is None]

    def proposal(self, item_id: str) -> EditView | CommandView | None:
        """The edit or the command proposal with this id (what a/r/e answer)."""
        return self.edits.get(item_id) or self.commands.get(item_id)

    def undecided(self) -> bool:
        """Does an edit or a command await the reviewer?"""
        return (any(e.decided is None for e in self.edits.values())
                or any(c.decided is None for c in self.commands.values()))


def _num(value: Any, default: float | None = None) -> float | None:
    number = ev.record_number(value)
    return default if number is None else number


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def clock(seconds: float) -> str:
    return _clock(seconds)
