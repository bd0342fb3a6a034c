"""The state a screen shows at one point of a session's log (runs, edits, commands, alarms, the
agent's transcript, bounded tails), and the reference fold over every event: what the
replayer's seeks (player.py) must equal."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from portside.core.log import events as ev
from portside.core.log.ledger import LEDGER_KINDS, AlarmEntry, Ledger
from portside.core.log.render import event_text

DEFAULT_TAIL = 20


# --- the state a screen shows at one point of the log ---------------------------------------


@dataclass
class RunState:
    run_id: str
    role: str
    attempt: int
    target: str
    command: str
    started_seq: int
    started_at: float
    outcome: str = "running"
    finished_seq: int | None = None
    exit_code: int | None = None
    wall_s: float | None = None
    compile_s: float | None = None
    steady_step_s: float | None = None
    tail: deque[str] = field(default_factory=deque)
    last_step: dict[str, Any] | None = None

    def copy(self) -> RunState:
        other = RunState(**{k: getattr(self, k) for k in _RUN_FIELDS})
        other.tail = deque(self.tail, maxlen=self.tail.maxlen)
        return other


_RUN_FIELDS = tuple(f for f in RunState.__dataclass_fields__ if f != "tail")


@dataclass
class EditState:
    edit_id: str
    path: str
    seq: int  # the edit.proposed event: a UI reads the diff from it
    status: str = "proposed"  # proposed | approved | rejected | edited
    applied: bool = False
    reverted: bool = False


@dataclass
class CommandState:
    command_id: str
    command: str
    cwd: str
    seq: int  # the proposal's event (command.proposed, or a legacy edit.proposed)
    status: str = "proposed"  # proposed | approved | rejected | edited


@dataclass
class ReplayState:
    """Everything a replay screen shows at ``seq`` (0: before the first event)."""

    seq: int = 0
    ts: float | None = None
    tail_lines: int = DEFAULT_TAIL
    counts: dict[str, int] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    started_at: float | None = None
    state: str = "not started"
    verdict: str | None = None
    end_reason: str = ""
    runs: dict[str, RunState] = field(default_factory=dict)
    edits: dict[str, EditState] = field(default_factory=dict)  # file edits only
    commands: dict[str, CommandState] = field(default_factory=dict)
    ledger: Ledger = field(default_factory=Ledger)  # interventions, human time, $: one fold
    claims: int = 0
    last_claim: str = ""
    transcript: deque[str] = field(default_factory=deque)

    def __post_init__(self) -> None:
        self.transcript = deque(self.transcript, maxlen=self.tail_lines)

    # --- queries a screen makes ---------------------------------------------------------------

    @property
    def alarms(self) -> dict[str, AlarmEntry]:
        return self.ledger.alarms

    def open_alarms(self) -> list[AlarmEntry]:
        return [a for a in self.alarms.values() if not a.cleared]

    def attempts(self) -> int:
        return self.ledger.attempts

    @property
    def interventions(self) -> int:
        return self.ledger.interventions

    @property
    def steering(self) -> int:
        return self.ledger.steering

    @property
    def human_s(self) -> float:
        return self.ledger.human_s

    @property
    def review_notes(self) -> int:
        return self.ledger.review_notes

    @property
    def token_usd(self) -> float:
        return self.ledger.token_usd

    def copy(self) -> ReplayState:
        other = ReplayState(
            seq=self.seq,
            ts=self.ts,
            tail_lines=self.tail_lines,
            counts=dict(self.counts),
            info=dict(self.info),
            started_at=self.started_at,
            state=self.state,
            verdict=self.verdict,
            end_reason=self.end_reason,
            runs={k: r.copy() for k, r in self.runs.items()},
            edits={k: EditState(**vars(e)) for k, e in self.edits.items()},
            commands={k: CommandState(**vars(c)) for k, c in self.commands.items()},
            ledger=self.ledger.copy(),
            claims=self.claims,
            last_claim=self.last_claim,
            transcript=deque(self.transcript),
        )
        return other

    # --- the fold -----------------------------------------------------------------------------

    def apply(self, e: ev.Event) -> None:
        """Fold one event (every kind): what live playback does event by event."""
        kind = str(e.__struct_config__.tag)
        self.counts[kind] = self.counts.get(kind, 0) + 1
        self.seq, self.ts = e.seq, e.ts
        self._apply_structural(e)
        self._apply_tail(e)

    def _apply_structural(self, e: ev.Event) -> None:
        if e.__struct_config__.tag in LEDGER_KINDS:
            self.ledger.apply(e)
        match e:
            case ev.SessionStarted():
                self.started_at = e.ts
                self.info = {"project": e.project, "target": e.target, "agent": e.agent,
                             "title": e.title, "mode": e.mode, "reviewer": e.reviewer}
                self.state = "running"
            case ev.SessionState():
                self.state = e.state
            case ev.SessionEnded():
                self.verdict, self.end_reason = e.verdict, e.reason
                self.state = f"ended · {e.verdict}"
            case ev.AgentClaimed():
                self.claims += 1
                self.last_claim = e.summary
            case ev.CommandProposed() | ev.EditProposed() if (cmd := ev.as_command(e)) is not None:
                self.commands[cmd.command_id] = CommandState(cmd.command_id, cmd.command,
                                                             cmd.cwd, e.seq)
            case ev.EditProposed():
                self.edits[e.edit_id] = EditState(e.edit_id, e.path, e.seq)
            case ev.EditDecided() if e.edit_id in self.commands:
                self.commands[e.edit_id].status = e.decision
            case ev.EditDecided() if e.edit_id in self.edits:
                self.edits[e.edit_id].status = e.decision
            case ev.EditApplied() if e.edit_id in self.edits:
                self.edits[e.edit_id].applied = True
            case ev.EditReverted() if e.edit_id in self.edits:
                self.edits[e.edit_id].reverted = True
            case ev.RunStarted():
                self.runs[e.run_id] = RunState(
                    e.run_id, e.role, e.attempt, e.target, e.command, e.seq, e.ts,
                    tail=deque(maxlen=self.tail_lines),
                )
            case ev.RunFinished() if e.run_id in self.runs:
                run = self.runs[e.run_id]
                run.outcome, run.finished_seq, run.exit_code = e.outcome, e.seq, e.exit_code
                run.wall_s, run.compile_s, run.steady_step_s = e.wall_s, e.compile_s, e.steady_step_s

    def _apply_tail(self, e: ev.Event) -> None:
        match e:
            # Output or records arriving after run.finished (the runner flushes before it
            # finishes, so this should not happen) are not part of the run's tail: that keeps
            # a seek's backward read bounded by the run's start and finish.
            case ev.RunOutput() if e.run_id in self.runs and self.runs[e.run_id].finished_seq is None:
                self.runs[e.run_id].tail.extend(e.lines)
            case ev.RunRecord() if e.run_id in self.runs and self.runs[e.run_id].finished_seq is None:
                for rec in e.records:
                    if rec.get("type") == "step":
                        self.runs[e.run_id].last_step = rec
            case ev.AgentText() | ev.AgentToolCall() | ev.AgentToolResult() | ev.AgentClaimed():
                self.transcript.append(event_text(e))


def fold(events: Iterable[ev.Event], tail_lines: int = DEFAULT_TAIL) -> ReplayState:
    """The reference fold: every event in order (what ``state_at`` must equal)."""
    state = ReplayState(tail_lines=tail_lines)
    for e in events:
        state.apply(e)
    return state
