"""The session's facts, folded from its log: the one place that decides what counts.

Every reader of a session's numbers asks a :class:`Ledger`: the engine (budget checks, the
verdict, ``verify --json``), the live screen's header, replay, exports, the report, ``show`` and
``stats``. The SQL view ``session_summary`` stays for Datasette users; a test holds it equal.

What counts, decided once here:

- **Interventions** are the reviewer's actions during the session. Review notes written while
  replaying it (``during_replay``) are counted apart (``review_notes``), never as interventions
  or human minutes of the migration: they are made after it.
- **Human time** is the reviewer's busy time: the union of the interventions' windows
  ``attention_started_at → decided_at`` (overlapping windows, an ack open while a verdict is
  being written, count once; negative or non-finite spans count 0). Exports keep each window.
- **Token $** is what the agent recorded (``agent.usage.cost_usd``: the agent prices its own
  turns with prompt-cache factors and the session's price table; Claude Code reports its own
  total). Usage with tokens but no cost is listed in ``unpriced_models``.
- **Compute $** prices each finished run from the device facts it finished with, with the price
  table the session recorded (the shipped table plus the criteria's ``[prices]`` overrides).
  A reference reused from a stored run (``run.started`` ``reused_from``) costs 0 here: its
  compute counts once, in the session that ran it.
- **Attempts** are candidate runs, except those portside itself was killed during
  (``engine-killed``: not the agent's attempt; the run is made again on resume, and its compute
  still counts); failures are outcomes ``failed-*``; silent ones ``failed-silent``. A **valid reference** is a reference run that finished ``passed`` (an
  aborted or engine-killed one never counts).
- A candidate **stopped** by the criteria's ``[stop]`` (``run.finished`` reason ``stopped``,
  outcome ``failed-silent``) is a failed attempt; the **compute it saved** is the references'
  step count (their median) less its steps, times a steady step time (:meth:`Ledger.saved_step_s`:
  the references' where it ran on their device, its own only on another), priced from its
  device facts.
- **Open alarms** are raised and not cleared (an override clears); acknowledging keeps one open.
- A run portside itself was killed during is **superseded** by its rerun
  (:meth:`Ledger.superseded_by`): a reference by the next one with its attempt (its seed
  offset), a candidate by the next candidate attempt (it was no attempt of its own). Its alarms
  are then closed with ``alarm.cleared`` naming the rerun: they were about a run nothing counts
  any more. Only the event clears: a log without one reads as it always did.
- An alarm's **title and evidence** are the newest ``alarm.updated``'s, else the raised ones
  (:func:`alarm_refresh`: the live card, replay, the store's rows, the report and exports).
- The **reviewer's verdict** is the last ``verdict`` intervention's ``verdict`` field.

Only the kinds in :data:`LEDGER_KINDS` change a ledger, and they are the rare ones, so a reader
may fold just those (the store reads them through its replay index).
"""

from __future__ import annotations

import copy
import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from portside.core.log import costs
from portside.core.log import events as ev
from portside.core.log.busy_time import BusyWindows

ENGINE_KILLED = "engine-killed"  # the reason resume gives a run its killed engine left live
STOPPED = "stopped"  # the reason of a candidate run ended by [stop] (core/log/decided.py)
LEDGER_KINDS: frozenset[str] = frozenset({
    "session.started", "session.ended", "agent.usage", "run.started", "run.finished",
    "alarm.raised", "alarm.updated", "alarm.acknowledged", "alarm.cleared", "intervention",
})


@dataclass
class RunEntry:
    run_id: str
    role: str
    attempt: int
    target: str
    seq: int
    started_at: float
    finished: ev.RunFinished | None = None
    compute_usd: float | None = None  # None: unfinished, or a device without a price row
    threads: int = 0  # OMP threads portside gave it: runs at once shared this machine
    reused_from: dict[str, Any] = field(default_factory=dict)  # a reference copied, not run

    @property
    def outcome(self) -> str:
        return self.finished.outcome if self.finished is not None else "running"

    @property
    def engine_killed(self) -> bool:
        return self.finished is not None and self.finished.reason == ENGINE_KILLED

    @property
    def stopped(self) -> bool:
        return self.finished is not None and self.finished.reason == STOPPED

    @property
    def valid_reference(self) -> bool:
        return self.role == "reference" and self.outcome == "passed"


@dataclass
class AlarmEntry:
    alarm_id: str
    seq: int
    check: str
    severity: str
    title: str
    run_id: str
    raised_at: float
    acknowledged: bool = False
    cleared: bool = False
    cleared_reason: str = ""  # alarm.cleared's reason (an override's says so, or nothing)
    overridden: bool = False  # cleared by an override-alarm intervention
    shown_at: float | None = None  # not from the log: the gate's note of the reviewer's first look
    evidence: dict[str, Any] = field(default_factory=dict)
    evidence_step: int | None = None  # the candidate step the evidence covers (None: as raised)
    updated_at: float | None = None

    @property
    def is_error(self) -> bool:
        return ev.is_error_or_worse(self.severity)


def alarm_refresh(e: ev.AlarmUpdated) -> dict[str, Any]:
    """What an ``alarm.updated`` changes in its alarm, the one rule: the ledger's entry (what the
    live card and replay show) and the store's ``alarms`` row (the report, exports) take these."""
    return {"title": e.title, "evidence": e.evidence, "evidence_step": e.step,
            "updated_at": e.ts}


def attention_s(i: ev.Intervention) -> float:
    span = i.decided_at - i.attention_started_at
    return span if math.isfinite(span) and span > 0 else 0.0


def verdict_of(i: ev.Intervention) -> tuple[str, str] | None:
    """(verdict, note) of a ``verdict`` intervention. Logs written before the field existed
    carried it as the note's ``pass: ...`` prefix; read those once, here."""
    if i.action != "verdict":
        return None
    if i.verdict:
        return i.verdict, i.note
    head, _, rest = i.note.partition(":")
    if head in ("pass", "fail"):
        return head, rest.strip()
    return None


@dataclass
class Ledger:
    session_id: str = ""
    started: ev.SessionStarted | None = None
    ended: ev.SessionEnded | None = None
    prices: costs.PriceTable = field(default_factory=costs.default_prices)
    price_error: str = ""  # the recorded overrides could not be applied (shipped table used)
    runs: dict[str, RunEntry] = field(default_factory=dict)
    alarms: dict[str, AlarmEntry] = field(default_factory=dict)
    interventions: int = 0
    steering: int = 0
    busy: BusyWindows = field(default_factory=BusyWindows)
    review_notes: int = 0
    review_busy: BusyWindows = field(default_factory=BusyWindows)
    verdict: tuple[str, str] | None = None
    token_usd: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    unpriced_models: set[str] = field(default_factory=set)
    last_seq: int = 0

    # --- the fold ----------------------------------------------------------------------------

    def apply(self, e: ev.Event) -> None:
        self.session_id = self.session_id or e.session_id
        self.last_seq = max(self.last_seq, e.seq)
        match e:
            case ev.SessionStarted():
                self.started = e
                self._prices_from(e.criteria)
            case ev.SessionEnded():
                self.ended = e
            case ev.AgentUsage():
                self.token_usd += e.cost_usd if math.isfinite(e.cost_usd) else 0.0
                self.tokens_in += e.input_tokens
                self.tokens_out += e.output_tokens
                self.cache_read_tokens += e.cache_read_tokens
                self.cache_write_tokens += e.cache_write_tokens
                if not e.cost_usd and (e.input_tokens or e.output_tokens):
                    self.unpriced_models.add(e.model)
            case ev.RunStarted():
                self.runs[e.run_id] = RunEntry(e.run_id, e.role, e.attempt, e.target, e.seq, e.ts,
                                               threads=e.threads,
                                               reused_from=dict(e.reused_from))
            case ev.RunFinished() if e.run_id in self.runs:
                run = self.runs[e.run_id]
                run.finished = e
                # A reused reference was computed (and is counted) in the session it came from.
                run.compute_usd = 0.0 if run.reused_from else costs.run_cost_from_facts(
                    e.wall_s, e.device or None, self.prices)
            case ev.AlarmRaised():
                self.alarms[e.alarm_id] = AlarmEntry(e.alarm_id, e.seq, e.check, e.severity,
                                                     e.title, e.run_id, e.ts,
                                                     evidence=e.evidence)
            case ev.AlarmUpdated() if e.alarm_id in self.alarms:
                for name, value in alarm_refresh(e).items():
                    setattr(self.alarms[e.alarm_id], name, value)
            case ev.AlarmAcknowledged() if e.alarm_id in self.alarms:
                self.alarms[e.alarm_id].acknowledged = True
            case ev.AlarmCleared() if e.alarm_id in self.alarms:
                self.alarms[e.alarm_id].cleared = True
                self.alarms[e.alarm_id].cleared_reason = e.reason
            case ev.Intervention():
                if e.during_replay:
                    self.review_notes += 1
                    self.review_busy.add(e.attention_started_at, e.decided_at)
                    return
                self.interventions += 1
                self.steering += int(e.steering)
                self.busy.add(e.attention_started_at, e.decided_at)
                if e.action == "override-alarm" and e.target_id in self.alarms:
                    self.alarms[e.target_id].overridden = True
                decided = verdict_of(e)
                if decided is not None:
                    self.verdict = decided

    def _prices_from(self, criteria: dict[str, Any]) -> None:
        overrides = criteria.get("prices") if isinstance(criteria, dict) else None
        self.prices, self.price_error = costs.default_prices(), ""
        if overrides:
            try:
                self.prices = costs.load_prices(dict(overrides))
            except (costs.PriceError, TypeError, ValueError) as exc:
                self.price_error = str(exc)

    def copy(self) -> Ledger:
        # Shallow copies (what dataclasses.replace makes, at a tenth of its cost: a replay
        # copies every run and alarm for each snapshot it keeps).
        other = copy.copy(self)
        other.runs = {k: copy.copy(r) for k, r in self.runs.items()}
        other.alarms = {k: copy.copy(a) for k, a in self.alarms.items()}
        other.unpriced_models = set(self.unpriced_models)
        other.busy, other.review_busy = self.busy.copy(), self.review_busy.copy()
        return other

    # --- facts -------------------------------------------------------------------------------

    @property
    def human_s(self) -> float:
        return self.busy.seconds

    @property
    def review_s(self) -> float:
        return self.review_busy.seconds

    @property
    def human_minutes(self) -> float:
        return self.human_s / 60.0

    def candidates(self) -> list[RunEntry]:
        """The candidate attempts (runs cut off by a kill of portside itself are not)."""
        return [r for r in self.runs.values() if r.role == "candidate" and not r.engine_killed]

    def references(self) -> list[RunEntry]:
        return [r for r in self.runs.values() if r.role == "reference"]

    def valid_references(self) -> list[RunEntry]:
        return [r for r in self.runs.values() if r.valid_reference]

    @property
    def attempts(self) -> int:
        return len(self.candidates())

    @property
    def failures(self) -> int:
        return sum(1 for r in self.candidates() if r.outcome.startswith("failed-"))

    @property
    def silent_failures(self) -> int:
        return sum(1 for r in self.candidates() if r.outcome == "failed-silent")

    @property
    def successful_runs(self) -> int:
        return sum(1 for r in self.candidates() if r.outcome == "passed")

    @property
    def compute_usd(self) -> float:
        return sum(r.compute_usd or 0.0 for r in self.runs.values())

    def expected_steps(self) -> int | None:
        """A candidate's steps had it trained to its end: the valid references' (their median)."""
        steps = sorted(r.finished.steps for r in self.valid_references()
                       if r.finished is not None and r.finished.steps > 0)
        return steps[len(steps) // 2] if steps else None

    def saved_s(self, run: RunEntry) -> float:
        """The run seconds a stopped candidate did not spend (0 for any other run)."""
        fin, expected = run.finished, self.expected_steps()
        if not run.stopped or fin is None or expected is None or fin.steps >= expected:
            return 0.0
        step_s = self.saved_step_s(run)
        return (expected - fin.steps) * step_s if step_s and math.isfinite(step_s) else 0.0

    def saved_step_s(self, run: RunEntry) -> float | None:
        """The steady step time a stopped candidate's steps not run are counted at.

        The references' steady step (:func:`steady_step_of`, over whole runs) where the
        candidate ran on the device they ran on (:func:`same_device`), or had no steady step
        of its own (stopped inside its warm-up); its own only where it ran on another device
        (a port to a TPU: the references' step says nothing of its speed). A stopped run's own
        steady step is the median of the few steps it made before the stop, all in its first
        seconds, which run slower than the steady state: the probe's first-steps work, and
        portside's own start beside it on the same cores (counted at those, issue 40's bench
        said 45-56 s saved where ~30 s were). The same command on the same device steps as
        its references do; a port that really is slower there is counted at their step, so
        the saving errs low, not high."""
        fin = run.finished
        if fin is None:
            return None
        refs = [r for r in self.valid_references()
                if r.finished is not None and r.finished.steady_step_s]
        theirs = steady_step_of(refs)
        own = fin.steady_step_s
        if theirs is None or (own and not all(same_device(fin.device, r.finished.device)
                                              for r in refs if r.finished is not None)):
            return own or None
        return theirs

    @property
    def compute_saved_s(self) -> float:
        return sum(self.saved_s(r) for r in self.candidates())

    @property
    def compute_saved_usd(self) -> float:
        total = 0.0
        for r in self.candidates():
            saved = self.saved_s(r)
            if saved and r.finished is not None:
                total += costs.run_cost_from_facts(saved, r.finished.device or None,
                                                   self.prices) or 0.0
        return total

    def unpriced_runs(self) -> list[str]:
        return [r.run_id for r in self.runs.values()
                if r.finished is not None and r.compute_usd is None]

    @property
    def human_usd_per_hour(self) -> float:
        row = self.prices.find(costs.HUMAN_RATE)
        return row.usd if row is not None else 0.0

    @property
    def human_usd(self) -> float:
        return self.human_minutes / 60.0 * self.human_usd_per_hour

    @property
    def total_usd(self) -> float:
        return self.compute_usd + self.token_usd + self.human_usd

    def open_alarms(self) -> list[AlarmEntry]:
        """Not cleared, most severe first, then oldest."""
        live = [a for a in self.alarms.values() if not a.cleared]
        return sorted(live, key=lambda a: (-ev.SEVERITY_RANK.get(a.severity, 0), a.seq))

    def open_errors(self) -> list[AlarmEntry]:
        return [a for a in self.open_alarms() if a.is_error]

    def superseded_by(self, run_id: str) -> list[tuple[AlarmEntry, RunEntry]]:
        """The open alarms (each with its run) of the runs that ``run_id`` was made in place
        of: runs portside was killed during, of its role, started before it; for a reference
        the one with its attempt (its seed offset: an aborted reference is run again in its
        slot); for a candidate every one since the last candidate that was an attempt (those
        were not, :meth:`candidates`; one the agent answered for is never superseded). A run
        the reviewer aborted or that failed on its own is history, never superseded."""
        new = self.runs.get(run_id)
        if new is None or new.role not in ("reference", "candidate"):
            return []
        before = sorted((r for r in self.runs.values()
                         if r.role == new.role and r.seq < new.seq), key=lambda r: r.seq)
        if new.role == "reference":
            killed = [r for r in before if r.engine_killed and r.attempt == new.attempt]
        else:
            killed = []
            for r in reversed(before):
                if not r.engine_killed:
                    break
                killed.append(r)
        by_run = {r.run_id: r for r in killed}
        return [(a, by_run[a.run_id]) for a in self.alarms.values()
                if not a.cleared and a.run_id in by_run]

    def goal_met(self) -> bool | None:
        """Passed with no goal-regression alarm; None while the session is open."""
        if self.ended is None or self.ended.verdict == "undecided":
            return None
        regressed = any(a.check == "goal-regression" for a in self.alarms.values())
        return self.ended.verdict == "pass" and not regressed

    def cost(self) -> dict[str, Any]:
        """Everything the session cost, as the study counts it: every attempt (failed ones
        included), the agent's tokens, the reviewer's minutes; and per *successful* run."""
        total = self.total_usd
        return {
            "compute_usd": self.compute_usd,
            "tokens_usd": self.token_usd,
            "human_usd": self.human_usd,
            "total_usd": total,
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "human_minutes": self.human_minutes,
            "human_usd_per_hour": self.human_usd_per_hour,
            "interventions": self.interventions,
            "steering": self.steering,
            "review_notes": self.review_notes,
            "attempts": self.attempts,
            "failed_attempts": self.attempts - self.successful_runs,
            "successful_runs": self.successful_runs,
            # [stop]: candidates ended at their first decisive alarm, and what they did not run
            "stopped_runs": sum(1 for r in self.candidates() if r.stopped),
            "compute_saved_s": self.compute_saved_s,
            "compute_saved_usd": self.compute_saved_usd,
            "cost_per_successful_run_usd": costs.cost_per_successful_run(
                total, self.successful_runs),
            "unpriced_models": sorted(self.unpriced_models),
            "unpriced_runs": self.unpriced_runs(),
            **({"price_error": self.price_error} if self.price_error else {}),
        }


def steady_step_of(runs: list[RunEntry]) -> float | None:
    """Runs' steady step time: the median of each's (core/checks/slow.py: the median step time
    after warm-up, compiled steps left out); None where none has one. A side's speed in the
    performance sentence (core/log/performance.py) and a stopped run's saving."""
    steady = [float(r.finished.steady_step_s) for r in runs
              if r.finished is not None and r.finished.steady_step_s]
    return statistics.median(steady) if steady else None


def same_device(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two runs' device facts (run.finished ``device``) say the same device: its kind
    and how many. Unknown (no kind recorded on either) is not the same."""
    kind = a.get("device_kind")
    return bool(kind) and kind == b.get("device_kind") \
        and a.get("device_count", 1) == b.get("device_count", 1)


def fold(events: Any) -> Ledger:
    ledger = Ledger()
    for e in events:
        ledger.apply(e)
    return ledger
