"""The one vocabulary of portside: every event a session produces.

The agent, the reviewer, the runs and the checks all speak in these events; the store appends
them, the UI renders them, replay and export read them back. One tagged union, one JSON codec
with a schema version. ``seq`` is assigned by the store (gap-free per session); producers leave
it at 0. Float fields hold finite numbers: JSON has no NaN, so measured values that can be
non-finite travel as the strings "nan", "inf", "-inf" (as the probe writes them).
"""

from __future__ import annotations

import math
import time
import uuid
from typing import Annotated, Any, Literal

import msgspec

SCHEMA_VERSION = 1

# larger: a few steps of a candidate at a bigger batch or sequence size ([larger] criteria)
Role = Literal["reference", "candidate", "larger"]
Severity = Literal["info", "warning", "error", "critical"]
Outcome = Literal["passed", "failed-error", "failed-timeout", "failed-silent", "aborted", "running"]
Verdict = Literal["pass", "fail", "undecided"]

# Bounds checked at the door (decode): what SQLite and datetime can hold. A recording with
# ts=1e18 or a 2**64 count is refused with the field named, instead of breaking every list.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_TS = 253402300799.0  # 9999-12-31 23:59:59 UTC, the last second datetime can show
MAX_DEPTH = 64  # nesting of free-form payloads (criteria, meta, records, evidence, input)
Int = Annotated[int, msgspec.Meta(ge=INT64_MIN, le=INT64_MAX)]
Seq = Annotated[int, msgspec.Meta(ge=0, le=INT64_MAX)]
Ts = Annotated[float, msgspec.Meta(ge=0.0, le=MAX_TS)]

SEVERITIES: tuple[str, ...] = ("info", "warning", "error", "critical")

#: Every alarm kind the checks raise (core/checks/alarms.py keeps it true): vocabulary, so the
#: criteria can name kinds ([stop]) without importing the checks.
ALARM_KINDS: tuple[str, ...] = (
    "numeric-drift", "goal-regression", "clipping-changed", "lr-schedule-changed", "non-finite",
    "wrong-hardware", "unverified-hardware", "recompilation", "cpu-fallback", "stalled",
    "timed-out", "crashed", "no-metrics", "slow", "agent-claim-contradicted", "budget-exhausted",
    "reference-failed", "ranks-diverged", "step-count-differs", "edit-mismatch",
    "outside-workspace", "global-batch-changed", "rank-averaging-changed", "evidence-tampered",
    "memory-peak",
    "optimizer-changed", "data-changed", "precision-changed", "too-few-references",
)
SEVERITY_RANK: dict[str, int] = {s: i for i, s in enumerate(SEVERITIES)}

INTERVENTION_KINDS = (
    "approve",
    "reject",
    "edit",
    "message",
    "pause",
    "resume",
    "rerun",
    "abort",
    "acknowledge-alarm",
    "override-alarm",
    "verdict",
    "note",
    "review-note",
)
InterventionKind = Literal[
    "approve",
    "reject",
    "edit",
    "message",
    "pause",
    "resume",
    "rerun",
    "abort",
    "acknowledge-alarm",
    "override-alarm",
    "verdict",
    "note",
    "review-note",
]


class Event(msgspec.Struct, kw_only=True, tag_field="kind", omit_defaults=False):
    """Fields every event carries. ``ts`` is UTC epoch seconds."""

    session_id: str
    seq: Seq = 0
    ts: Ts = 0.0


# --- session ---------------------------------------------------------------------------------


class SessionStarted(Event, tag="session.started"):
    project: str
    target: str
    agent: str = "none"  # "claude:<model>", "scripted:<file>", "none" (verification only)
    title: str = ""
    criteria: dict[str, Any] = {}
    reference_command: str = ""
    candidate_command: str = ""
    reviewer: str = ""
    mode: str = "live"  # live | verify | headless | demo
    meta: dict[str, Any] = {}


class SessionEnded(Event, tag="session.ended"):
    verdict: Verdict
    outcome: str = ""
    reason: str = ""


class SessionState(Event, tag="session.state"):
    """Paused, resumed, waiting on the API, budget stop: what the header shows."""

    state: str
    detail: str = ""


# --- agent -----------------------------------------------------------------------------------


class AgentText(Event, tag="agent.text"):
    text: str


class AgentToolCall(Event, tag="agent.tool_call"):
    call_id: str
    name: str
    input: dict[str, Any] = {}


class AgentToolResult(Event, tag="agent.tool_result"):
    call_id: str
    content: str
    is_error: bool = False


class AgentUsage(Event, tag="agent.usage"):
    model: str
    input_tokens: Int = 0
    output_tokens: Int = 0
    cache_read_tokens: Int = 0
    cache_write_tokens: Int = 0
    cost_usd: float = 0.0


class AgentClaimed(Event, tag="agent.claimed"):
    summary: str


# --- edits -----------------------------------------------------------------------------------


class RiskMark(msgspec.Struct, frozen=True):
    """What a proposed edit touches that can silently alter training (core/workspace/risk.py)."""

    kind: str  # clipping, optimizer, lr-scheduler, loss, precision, seed, ... (risk.KINDS)
    text: str  # "touches gradient clipping: max_norm 1.0 → 0.05"
    line: int = 0  # 1-based, in the proposed text (in the old text for a removal)


class EditProposed(Event, tag="edit.proposed"):
    edit_id: str
    path: str
    before: str
    after: str
    rationale: str = ""
    risks: list[RiskMark] = []  # computed by the host when it publishes the proposal


class CommandProposed(Event, tag="command.proposed"):
    """A shell command an agent wants to run (Claude Code's Bash), before it runs. The gate
    decides it like an edit: its answer is an ``edit.decided`` whose ``edit_id`` is this
    ``command_id`` ("edited" carries the command to run instead). Not an edit: it touches no
    file of the workspace by itself, and nothing counts it as one."""

    command_id: str
    command: str
    cwd: str = "."  # relative to the workspace root
    description: str = ""


#: How earlier portside versions recorded a command: an ``edit.proposed`` whose path is
#: ``$ <cwd>`` and whose ``after`` is the command. Such logs still replay, as commands.
LEGACY_COMMAND_PREFIX = "$ "


def as_command(event: Event) -> CommandProposed | None:
    """The command proposal ``event`` is (``command.proposed``, or the legacy edit form)."""
    if isinstance(event, CommandProposed):
        return event
    if (isinstance(event, EditProposed) and event.path.startswith(LEGACY_COMMAND_PREFIX)
            and not event.before):
        return CommandProposed(session_id=event.session_id, seq=event.seq, ts=event.ts,
                               command_id=event.edit_id, command=event.after,
                               cwd=event.path[len(LEGACY_COMMAND_PREFIX):] or ".",
                               description=event.rationale)
    return None


def is_file_edit(event: Event) -> bool:
    """An ``edit.proposed`` that proposes a file change (not a legacy command)."""
    return isinstance(event, EditProposed) and as_command(event) is None


class EditDecided(Event, tag="edit.decided"):
    """The decision on a proposal: an edit, or a command (``edit_id`` is its command_id)."""

    edit_id: str
    decision: Literal["approved", "rejected", "edited"]
    by: Literal["reviewer", "policy"] = "reviewer"
    reason: str = ""
    after: str | None = None  # the reviewer's text when decision == "edited"


class EditApplied(Event, tag="edit.applied"):
    edit_id: str
    path: str = ""


class EditReverted(Event, tag="edit.reverted"):
    edit_id: str
    path: str = ""
    reason: str = ""


# --- runs ------------------------------------------------------------------------------------


class RunStarted(Event, tag="run.started"):
    run_id: str
    role: Role
    attempt: Int
    command: str
    target: str
    cwd: str = ""
    seed_offset: Int = 0
    threads: Int = 0  # OMP_NUM_THREADS portside gave it (runs sharing a machine); 0: none
    # A reference: the digest of what decides its result (core/session/reference_reuse.py);
    # "" when not keyed. A later session finds it by this and reuses it.
    reuse_key: str = ""
    # Set when this run is not run again but copied from a stored one with the same key:
    # {session, run_id, finished_at, host} of the run that computed it (its compute counts there).
    reused_from: dict[str, Any] = {}


class RunOutput(Event, tag="run.output"):
    run_id: str
    lines: list[str]
    stream: Literal["stdout", "stderr", "mixed"] = "mixed"


class RunRecord(Event, tag="run.record"):
    """Probe records (see core/probe/FORMAT.md) and metrics parsed from output, batched."""

    run_id: str
    records: list[dict[str, Any]]


class RunFinished(Event, tag="run.finished"):
    run_id: str
    exit_code: Int | None
    outcome: str
    signal: Int | None = None
    wall_s: float = 0.0
    compile_s: float = 0.0
    steady_step_s: float | None = None
    steps: Int = 0
    reason: str = ""  # exit | timeout | stalled | aborted | oom | crashed
    error_type: str = ""
    error_message: str = ""
    # Final values; a non-finite one is carried as "nan" / "inf" / "-inf" (JSON has no NaN).
    metrics: dict[str, float | str | None] = {}
    device: dict[str, Any] = {}


# --- alarms ----------------------------------------------------------------------------------


class AlarmRaised(Event, tag="alarm.raised"):
    alarm_id: str
    check: str  # the alarm's kind: numeric-drift, clipping-changed, ... ("kind" is the tag)
    severity: Severity
    title: str
    evidence: dict[str, Any] = {}
    run_id: str = ""


class AlarmUpdated(Event, tag="alarm.updated"):
    """An open alarm's evidence as the run went on: the checks saw it change materially since
    it was raised (or last updated). It replaces the alarm's title and evidence (the ledger's
    ``alarm_refresh``); severity and identity stay as raised. ``step``: the candidate's last
    step the new evidence covers."""

    alarm_id: str
    title: str
    evidence: dict[str, Any] = {}
    step: Int | None = None


class AlarmAcknowledged(Event, tag="alarm.acknowledged"):
    alarm_id: str
    by: str = ""
    note: str = ""


class AlarmCleared(Event, tag="alarm.cleared"):
    alarm_id: str
    reason: str = ""


class AlarmLocalized(Event, tag="alarm.localized"):
    """Where the candidate first diverged from the reference (trace mode, core/localize/traces.py),
    looked for after this alarm. ``divergence`` as `portside localize --json` gives it."""

    alarm_id: str
    run_id: str = ""
    divergence: dict[str, Any] | None = None
    summary: str = ""
    error: str = ""
    wall_s: float = 0.0


# --- the project -----------------------------------------------------------------------------


class ScanFinding(msgspec.Struct, frozen=True):
    """One place that will not move to a TPU as it is (core/scan/scan.py's Finding)."""

    path: str  # relative to the scanned folder, "/"-separated
    line: Int
    kind: str  # one of core/scan/scan.py KINDS
    what: str  # the construct as written
    action: str  # what a port must do about it


class ProjectScanned(Event, tag="project.scanned"):
    """`portside scan` of the project at the session's start: static, before any run; the
    screen's scan card, the report and the agent's task all read this one event."""

    root: str
    files: Int = 0
    parsed: Int = 0
    seconds: float = 0.0
    counts: dict[str, Int] = {}  # every finding's kind, counted (also those left out below)
    findings: list[ScanFinding] = []  # the first MAX_SCAN_FINDINGS, in path then line order
    total: Int = 0  # findings in all


MAX_SCAN_FINDINGS = 500  # a tree with more is summarised by `counts`; `portside scan` lists all


# --- the human -------------------------------------------------------------------------------


class Intervention(Event, tag="intervention"):
    """One human action, with the time the item was first shown and the time it was decided."""

    intervention_id: str
    action: InterventionKind
    steering: bool
    attention_started_at: Ts
    decided_at: Ts
    reviewer: str = ""
    answers: Int | None = None  # seq of the event this answers
    target_id: str = ""  # edit id / alarm id / run id it concerns
    note: str = ""
    during_replay: bool = False
    verdict: Literal["", "pass", "fail"] = ""  # set on action "verdict": the reviewer's decision


AnyEvent = (
    SessionStarted
    | SessionEnded
    | SessionState
    | AgentText
    | AgentToolCall
    | AgentToolResult
    | AgentUsage
    | AgentClaimed
    | EditProposed
    | EditDecided
    | EditApplied
    | EditReverted
    | RunStarted
    | RunOutput
    | RunRecord
    | RunFinished
    | AlarmRaised
    | AlarmAcknowledged
    | AlarmCleared
    | AlarmLocalized
    | Intervention
    | CommandProposed  # from here on, newest last: the replay index's kind codes of older
    | AlarmUpdated  # kinds stay as they were
    | ProjectScanned
)

EVENT_TYPES: dict[str, type[Event]] = {
    cls.__struct_config__.tag: cls  # type: ignore[misc]
    for cls in AnyEvent.__args__  # type: ignore[attr-defined]
}

# Actions that change the course of the migration (the study's "steering" interventions).
STEERING_ACTIONS = frozenset({"reject", "edit", "message", "rerun", "abort", "override-alarm"})


class EventError(ValueError):
    """A malformed event; the message names the field."""


_encoder = msgspec.json.Encoder(order="deterministic")
_decoder = msgspec.json.Decoder(AnyEvent)


def encode(event: Event) -> bytes:
    """Canonical JSON bytes (sorted keys): stable across round trips."""
    return _encoder.encode(event)


def decode(data: bytes | str) -> Event:
    """Parse and validate one event; a bad field raises EventError naming it."""
    try:
        return _decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise EventError(_explain(str(exc))) from None
    except msgspec.DecodeError as exc:
        raise EventError(f"not valid JSON: {exc}") from None
    except RecursionError:
        raise EventError(f"nested deeper than {MAX_DEPTH} levels") from None


def check_payload(event: Event) -> None:
    """The bounds a type cannot say: free-form payloads nested at most MAX_DEPTH deep and
    holding only ints SQLite can store. Raises EventError naming the field."""
    for name in event.__struct_fields__:
        value = getattr(event, name)
        if not isinstance(value, dict | list):
            continue
        stack: list[tuple[Any, int]] = [(value, 1)]
        while stack:
            obj, depth = stack.pop()
            if depth > MAX_DEPTH:
                raise EventError(f"field {name}: nested deeper than {MAX_DEPTH} levels")
            for item in obj.values() if isinstance(obj, dict) else obj:
                if isinstance(item, dict | list):
                    stack.append((item, depth + 1))
                elif isinstance(item, int) and not INT64_MIN <= item <= INT64_MAX:
                    raise EventError(f"field {name}: integer {str(item)[:30]}… does not fit "
                                     "in 64 bits")


def to_builtins(event: Event) -> dict[str, Any]:
    return msgspec.to_builtins(event)


def from_builtins(obj: dict[str, Any]) -> Event:
    try:
        return msgspec.convert(obj, AnyEvent)
    except msgspec.ValidationError as exc:
        raise EventError(_explain(str(exc))) from None


def _explain(msg: str) -> str:
    # msgspec says "Expected `int`, got `str` - at `$.seq`"; lead with the field.
    if msg.startswith("Invalid value") and msg.endswith("`$.kind`"):
        value = msg.removeprefix("Invalid value ").partition(" - at")[0]
        return f"field kind: unknown event kind {value} (known: {', '.join(EVENT_TYPES)})"
    if " - at `$." in msg:
        text, _, where = msg.partition(" - at `$.")
        return f"field {where.rstrip('`')}: {text}"
    if msg.startswith("Object missing required field `"):
        name = msg.split("`")[1]
        return f"field {name}: missing"
    return msg


_NONFINITE = {"nan": math.nan, "inf": math.inf, "+inf": math.inf, "-inf": -math.inf,
              "infinity": math.inf, "-infinity": -math.inf}


def record_number(value: Any) -> float | None:
    """The one number parser for probe records, parsed metrics and event payloads: ints and
    floats as float; strings holding a number ("1.5", and "nan"/"inf"/"-inf", how non-finite
    values travel in JSON) as float; anything else (None, bools, other text) None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        try:
            return float(value)
        except OverflowError:  # an int beyond float range
            return math.inf if value > 0 else -math.inf
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _NONFINITE:
            return _NONFINITE[text]
        try:
            return float(text)
        except ValueError:
            return None
    return None


def now() -> float:
    return time.time()


def new_id(prefix: str = "") -> str:
    return f"{prefix}{uuid.uuid4().hex[:12]}"


def new_session_id() -> str:
    """Readable and sortable: 20261129-163012-3fa9."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:4]


def is_error_or_worse(severity: str) -> bool:
    return SEVERITY_RANK.get(severity, 0) >= SEVERITY_RANK["error"]
