"""The verification engine: independent reference runs, a candidate run, live and final checks.

Reference runs (seed offsets 0..N-1) measure the natural run-to-run spread; the candidate runs
with offset 0 and is judged against that envelope while it runs (alarms as soon as they are
decided) and again at its end. It may start while references still run (start_references):
then it is judged against those that have ended valid, and its end waits for the rest. Every
attempt gets an outcome as the study counts them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from portside.core.checks import Alarm, RunRecords, sort_alarms
from portside.core.checks.evidence import ReferenceFailed
from portside.core.checks.larger import check_larger
from portside.core.checks.records.records_fold import IncrementalRecords
from portside.core.checks.settings import settings_summary
from portside.core.log import events as ev
from portside.core.log.bus import EventBus
from portside.core.log.costs import PriceTable, load_prices, run_cost_from_facts
from portside.core.log.criteria import Criteria
from portside.core.log.ledger import ENGINE_KILLED, STOPPED, Ledger
from portside.core.run.runner import Executor, OutputPattern, Runner, RunResult, RunSpec
from portside.core.run.watch_output import TAIL_LINES
from portside.core.session.candidate_run import CandidateRun, LiveCheckStats
from portside.core.session.outcome import classify_outcome, run_end, summarize_run
from portside.core.session.reference_reuse import ReferenceReuse, copy_into
from portside.core.session.run_slots import RunSlots


@dataclass
class RunReport:
    """What one run amounted to: the summary `verify --json` prints, and its alarms."""

    run_id: str
    role: str
    attempt: int
    outcome: str
    result: RunResult
    records: RunRecords
    summary: dict[str, Any]
    alarms: list[Alarm] = field(default_factory=list)
    cost_usd: float | None = None
    host: str = ""  # where it ran, when not here (a remote executor's label)
    localize: dict[str, Any] | None = None  # set by `verify --localize` (core/localize/runs.py)
    # A reference copied from a stored run (core/session/reference_reuse.py): where it came from.
    reused_from: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        s = self.summary
        return {
            "run": self.run_id,
            "role": self.role,
            "attempt": self.attempt,
            "outcome": self.outcome,
            "exit_code": self.result.exit_code,
            "signal": self.result.signal,
            "reason": self.result.reason,
            "error": (
                f"{self.result.error_type}: {self.result.error_message}".strip(": ")
                if self.result.error_type or self.result.error_message
                else ""
            ),
            "wall_s": round(self.result.wall_s, 3),
            "compile_s": s.get("compile_s"),
            "compile_s_outside_steps": s.get("compile_s_outside_steps"),
            "compiles": s.get("compiles"),
            "steady_step_s": s.get("steady_step_s"),
            "steps": s.get("steps"),
            "metrics": s.get("metrics", {}),
            "device": s.get("device", {}),
            "memory": s.get("memory"),
            "settings": settings_summary(self.records.facts),
            "cost_usd": self.cost_usd,
            **({"host": self.host} if self.host else {}),
            **({"reused_from": self.reused_from} if self.reused_from else {}),
        }


def _cores() -> int:
    """The cores this process may run on (its affinity, where the OS says)."""
    with contextlib.suppress(AttributeError, OSError):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def output_patterns(criteria: Criteria) -> list[OutputPattern]:
    return [OutputPattern(name, rx) for name, rx in criteria.output_patterns()]


# Advice about the session's references, not about a run: said once a session.
SAID_ONCE = frozenset({"too-few-references"})


class CandidateNotStarted(Exception):
    """The candidate waited for a slot beside the references and the session stopped first."""


class Verifier:
    """Runs and judges; publishes run.* and alarm.* events on the bus."""

    def __init__(
        self,
        bus: EventBus,
        session_id: str,
        criteria: Criteria,
        target: str,
        probe_dir: Path,
        *,
        timeout_s: float | None = None,
        stall_s: float | None = None,
        prices: PriceTable | None = None,
        ledger: Ledger | None = None,
    ) -> None:
        self.bus = bus
        # The session's fold (the engine's): says which killed runs a run supersedes.
        self.ledger = ledger
        self.session_id = session_id
        self.criteria = criteria
        self.target = target
        self.timeout_s = timeout_s
        self.stall_s = stall_s
        self.runner = Runner(session_id, bus.publish, probe_dir)
        self.executors: dict[str, Executor] = {}  # by role: where that role's runs execute
        self.prices = prices or load_prices(criteria.price_overrides)
        self.references: list[RunReport] = []
        self.candidates: list[RunReport] = []
        self.larger: list[RunReport] = []  # [larger]: after a passed candidate, its attempt's
        self.current_run: str | None = None
        self.active_runs: set[str] = set()  # every run under way (references may overlap)
        self._folders: dict[str, Callable[[list[dict[str, Any]]], None]] = {}  # by run id
        self._ref_numbers: set[int] = set()  # references started: their attempt (seed slot)
        # References started and not yet ended, the slots they share with a candidate started
        # beside them, and who wants to know when one ends (a candidate being judged).
        self._refs_pending = 0
        self._slots: RunSlots | None = None
        self._on_reference: list[Callable[[], None]] = []
        self.live_stats = LiveCheckStats()
        # Set when portside itself is ending (a signal): an aborted run was cut off, not judged.
        self.cut_off = ""
        self.halted = False  # abort() of everything: the session is ending
        # References keyed, and reused from the store when the key is there (the engine sets
        # it; None: every reference runs, unkeyed).
        self.reuse: ReferenceReuse | None = None
        self._said: dict[tuple[str, str], str] = {}  # SAID_ONCE alarms published: their id

    def abort(self, run_id: str | None = None) -> bool:
        """Abort that run; without one, every run under way, and a candidate still waiting
        for its slot never starts (CandidateNotStarted)."""
        if run_id:
            return self.runner.abort(run_id)
        self.halted = True
        return any([self.runner.abort(r) for r in sorted(self.active_runs)])

    def reference_width(self) -> int:
        """How many references may run at once: `[hosts] parallel`, on this machine bounded
        by its cores (each run's interpreter and torch want one); on a remote host the
        criteria alone say (its cores are not ours to count)."""
        want = max(1, self.criteria.hosts.parallel)
        if getattr(self.executors.get("reference"), "label", ""):  # a remote executor
            return want
        return max(1, min(want, _cores()))

    def _threads(self, role: ev.Role) -> int:
        """OpenMP threads for a run on this machine while runs share it: its cores split
        between the runs at once, the same for every role so that their step times compare;
        0 (the run's own default) when they do not share it. torch's pool, a thread a core
        in each run, spins while it waits: two runs of it on two cores ran 3.3x slower each."""
        width = self.reference_width()
        if width < 2 or self._machine(role) or self._machine("reference"):
            return 0
        return max(1, _cores() // width)

    def _machine(self, role: str) -> str:
        return str(getattr(self.executors.get(role), "label", ""))  # "": this one

    def candidate_overlaps(self) -> bool:
        """Whether the candidate may start while references still run (`[hosts] overlap`):
        on another machine than theirs always (its cores are not theirs), on theirs when
        reference_width() leaves room for more than one run."""
        if not self.criteria.hosts.overlap:
            return False
        return self._machine("candidate") != self._machine("reference") \
            or self.reference_width() > 1

    async def run_references(
        self, count: int, command: str, cwd: Path, *, target: str = "cpu",
        env: dict[str, str] | None = None, stop: Callable[[], bool] | None = None,
    ) -> list[RunReport]:
        """`count` more references, up to reference_width() at once (they are independent:
        each has its own seed offset, folder and fold); `stop` is asked before each starts.
        Returned, and kept in self.references, in attempt order."""
        return await self.start_references(count, command, cwd, target=target, env=env,
                                           stop=stop)

    def start_references(
        self, count: int, command: str, cwd: Path, *, target: str = "cpu",
        env: dict[str, str] | None = None, stop: Callable[[], bool] | None = None,
    ) -> asyncio.Task[list[RunReport]]:
        """run_references as a task, queued before this returns: a candidate started after
        it waits behind them for a slot on their machine, and is judged against each valid
        one as it ends (run_candidate). Call it inside the loop."""
        slots = RunSlots(self.reference_width())
        if count:
            self._slots = slots
        self._refs_pending += count
        turns = [slots.ask() for _ in range(count)]  # in attempt order, now

        async def one(turn: asyncio.Future[None]) -> RunReport | None:
            try:
                await slots.wait(turn)
                try:
                    if stop is not None and stop():
                        return None
                    return await self.run_reference(command, cwd, target=target, env=env)
                finally:
                    slots.release()
            finally:
                self._refs_pending -= 1
                if not self._refs_pending:
                    self._slots = None
                for tell in list(self._on_reference):
                    tell()

        async def every() -> list[RunReport]:
            tasks = [asyncio.ensure_future(one(t)) for t in turns]
            try:
                done = await asyncio.gather(*tasks)
            except BaseException:  # one failed, or we were cancelled: none goes on unowned
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                raise
            return sorted((r for r in done if r is not None), key=lambda r: r.attempt)

        return asyncio.ensure_future(every())

    def valid_references(self) -> list[RunRecords]:
        """The envelope: only references that finished passed with steps (the ledger's valid
        references): an aborted or engine-killed one must never vouch for a candidate."""
        return [r.records for r in self.references if r.outcome == "passed" and r.records.n > 0]

    def _spec(self, role: ev.Role, attempt: int, command: str, cwd: Path, target: str,
              seed_offset: int, env: dict[str, str] | None) -> RunSpec:
        prefix = {"reference": "ref", "candidate": "cand", "larger": "big"}[role]
        return RunSpec(
            run_id=f"{prefix}{attempt}-{ev.new_id()}",  # 48 bits: ids never collide in a DB
            role=role,
            attempt=attempt,
            command=command,
            cwd=cwd,
            target=target,
            seed_offset=seed_offset,
            timeout_s=self.timeout_s,
            stall_s=self.stall_s,
            env=env,
            threads=self._threads("candidate" if role == "larger" else role),
            patterns=output_patterns(self.criteria),
            # the larger run is the candidate's, at another size: where the candidate runs
            executor=self.executors.get("candidate" if role == "larger" else role),
        )

    def _cost(self, result: RunResult, records: RunRecords) -> float | None:
        with contextlib.suppress(Exception):
            return run_cost_from_facts(result.wall_s, records.facts, self.prices)
        return None

    def _finish(self, spec: RunSpec, result: RunResult, alarms: list[Alarm],
                records: RunRecords | None = None) -> RunReport:
        if records is None:
            records = RunRecords.from_records(result.records, run_end(result, spec.stall_s),
                                              spec.run_id)
        summary = summarize_run(records, result.exit_code, result.wall_s,
                                self.criteria.compile.warmup_steps)
        outcome = classify_outcome(
            result.exit_code, result.reason == "timeout", result.reason == "stalled", alarms,
            stopped=result.reason == STOPPED,
        )
        if result.reason == "aborted":
            outcome = "aborted"
            if self.cut_off:  # run again on resume, and never an attempt (as a kill -9's run)
                result.reason, result.error_message = ENGINE_KILLED, self.cut_off
        report = RunReport(spec.run_id, spec.role, spec.attempt, outcome, result, records,
                           summary, alarms, self._cost(result, records),
                           host=getattr(spec.executor, "label", ""))
        steady = summary.get("steady_step_s")
        self.bus.publish(
            ev.RunFinished(
                session_id=self.session_id,
                run_id=spec.run_id,
                exit_code=result.exit_code,
                signal=result.signal,
                outcome=outcome,
                wall_s=result.wall_s,
                compile_s=float(summary.get("compile_s") or 0.0),
                steady_step_s=steady if isinstance(steady, float) else None,
                steps=int(summary.get("steps") or 0),
                reason=result.reason,
                error_type=result.error_type,
                error_message=result.error_message,
                metrics=summary.get("metrics", {}),
                # peak memory rides with the device facts, so the log (report, stats) has it
                device={**summary.get("device", {}),
                        **({"memory": summary["memory"]} if summary.get("memory") else {})},
            )
        )
        self._close_superseded(spec)
        return report

    def _close_superseded(self, spec: RunSpec) -> None:
        """This run was made in place of runs portside was killed during (a resume): their
        alarms were about a run nothing counts any more, so they are closed, naming this one
        (the ledger's rule). Once it has ended: until then that slot has no other result."""
        if self.ledger is None:
            return
        what = (f"reference #{spec.attempt}" if spec.role == "reference"
                else f"candidate attempt #{spec.attempt}")
        for alarm, old in self.ledger.superseded_by(spec.run_id):
            self.bus.publish(ev.AlarmCleared(
                session_id=self.session_id, alarm_id=alarm.alarm_id,
                reason=f"superseded by {spec.run_id}: {what} run again after portside was "
                       f"killed during {old.run_id}"))

    def _raise(self, alarm: Alarm, run_id: str) -> str:
        """Publish the alarm; its id. An advice that is the same for every run of the session
        (SAID_ONCE) is published once: its first id stands for the later runs' (issue 41.10:
        too-few-references on every run of a correct port, where nothing changes between them)."""
        once = (alarm.kind, alarm.title) if alarm.kind in SAID_ONCE else None
        if once is not None and once in self._said:
            return self._said[once]
        event = alarm.raised(self.session_id, run_id)
        self.bus.publish(event)
        if once is not None:
            self._said[once] = event.alarm_id
        return event.alarm_id

    async def run_reference(
        self, command: str, cwd: Path, *, target: str = "cpu", env: dict[str, str] | None = None
    ) -> RunReport:
        # Numbered when started: references running at once must not share a number (their
        # seed offset). The lowest free one: a reference portside was killed during is not
        # restored, and its rerun takes its slot (not the seed of one that passed beside it).
        taken = self._ref_numbers | {r.attempt for r in self.references}
        n = next(i for i in range(1, len(taken) + 2) if i not in taken)
        self._ref_numbers.add(n)
        spec = self._spec("reference", n, command, cwd, target, n - 1, env)
        reused = await self._reused(spec)
        if reused is not None:
            return reused
        live = IncrementalRecords()
        self.current_run = spec.run_id
        result = await self._run_folding(spec, lambda recs: live.add(recs))
        if self.current_run == spec.run_id:
            self.current_run = None
        records = live.snapshot(run_end(result, spec.stall_s), spec.run_id)
        alarms: list[Alarm] = []
        if result.exit_code != 0 or records.n == 0:
            why = result.error_message or result.reason
            alarms.append(Alarm(
                "reference-failed", "error",
                f"reference run #{n} did not train ({result.reason}, exit {result.exit_code}): "
                f"{why}"[:200],
                ReferenceFailed(run=spec.run_id, exit_code=result.exit_code,
                                reason=result.reason, error_type=result.error_type,
                                error_message=result.error_message,
                                tail=list(result.tail[-10:])),
                key=f"reference-failed:{n}",
            ))
        for alarm in alarms:
            self._raise(alarm, spec.run_id)
        report = self._finish(spec, result, alarms, records)
        self.references.append(report)
        self.references.sort(key=lambda r: r.attempt)  # one that started later may end first
        return report

    async def _reused(self, spec: RunSpec) -> RunReport | None:
        """Key the reference (spec.reuse_key); a stored run of that key, copied into this
        session's log, instead of running it, where there is one that may stand in."""
        if self.reuse is None:
            return None
        parts = await self.reuse.parts(
            spec.command, spec.cwd, target=spec.target, env=spec.env, threads=spec.threads,
            patterns=spec.patterns, timeout_s=spec.timeout_s, stall_s=spec.stall_s,
            executor=spec.executor or self.runner.executor)
        if parts is None:
            return None
        spec.reuse_key = parts.key(spec.seed_offset)
        stored = await self.reuse.find(spec.reuse_key, command=spec.command,
                                       seed_offset=spec.seed_offset, target=spec.target)
        if stored is None:
            return None
        host = str(getattr(spec.executor, "label", ""))
        started, finished, records, tail = copy_into(
            self.bus, self.session_id, spec.run_id, spec.attempt, spec.cwd, spec.reuse_key,
            stored, host)
        report = self.restore_run(started, finished, records, tail, [])
        report.host = host
        self.references.sort(key=lambda r: r.attempt)
        self._close_superseded(spec)
        return report

    async def _run_folding(self, spec: RunSpec,
                           on_records: Callable[[list[dict[str, Any]]], None]) -> RunResult:
        """Run with every record handed to `on_records`, which folds it: the runner keeps no
        record dicts of its own (a long run's would not fit in memory). Runs at once each
        get their own records, by run id."""
        self._folders[spec.run_id] = on_records
        self.active_runs.add(spec.run_id)
        self.runner.on_records = self._dispatch
        self.runner.keep_records = False
        try:
            return await self.runner.run(spec)
        finally:
            del self._folders[spec.run_id]
            self.active_runs.discard(spec.run_id)
            if not self._folders:
                self.runner.on_records = None
                self.runner.keep_records = True

    def _dispatch(self, run_id: str, recs: list[dict[str, Any]]) -> None:
        fold = self._folders.get(run_id)
        if fold is not None:
            fold(recs)

    async def run_candidate(
        self, command: str, cwd: Path, *, env: dict[str, str] | None = None
    ) -> RunReport:
        """Run and judge the candidate. Started while references still run (start_references),
        it waits behind them for a slot on their machine; its live checks begin with the
        first valid reference and take in each later one as it ends; its final pass waits
        for all of them: the verdict is the same function of every valid reference as when
        they had all ended first. An alarm raised against some of them and not against all
        is cleared once all are in. The judging is CandidateRun's (candidate_run.py)."""
        # As the ledger counts attempts: a run cut off by a kill of portside was none, and its
        # rerun on resume is that attempt again.
        n = 1 + sum(1 for c in self.candidates
                    if not (c.outcome == "aborted" and c.result.reason == ENGINE_KILLED))
        spec = self._spec("candidate", n, command, cwd, self.target, 0, env)
        slots = self._slots if self._refs_pending and (
            self._machine("candidate") == self._machine("reference")) else None
        if slots is not None:
            await slots.wait(slots.ask())
            if self.halted:  # stopped while it waited: as if the references had run first
                slots.release()
                raise CandidateNotStarted("the session stopped before the candidate's turn")
        result, records, alarms = await CandidateRun(self, spec).run(slots)
        report = self._finish(spec, result, alarms, records)
        self.candidates.append(report)
        return report

    async def run_larger(self, candidate: RunReport, cwd: Path, *,
                         env: dict[str, str] | None = None) -> RunReport:
        """[larger]: the candidate's command at a bigger size for a few steps (the probe ends
        it), judged on its own (core/checks/larger.py). Its attempt is the candidate's."""
        larger = self.criteria.larger
        spec = self._spec("larger", candidate.attempt, larger.render(), cwd, self.target, 0, env)
        spec.max_steps = larger.steps
        live = IncrementalRecords()
        self.current_run = spec.run_id
        try:
            result = await self._run_folding(spec, lambda recs: live.add(recs))
        finally:
            self.current_run = None
        records = live.snapshot(run_end(result, spec.stall_s), spec.run_id)
        alarms = [] if result.reason == "aborted" else check_larger(candidate.records, records,
                                                                    self.criteria)
        for alarm in alarms:
            self._raise(alarm, spec.run_id)
        report = self._finish(spec, result, alarms, records)
        self.larger.append(report)
        return report

    def restore_run(
        self,
        started: ev.RunStarted,
        finished: ev.RunFinished,
        records: list[dict[str, Any]],
        tail: list[str],
        alarms: list[Alarm],
    ) -> RunReport:
        """Rebuild a finished run's report from its events (a resumed session): the same
        RunResult -> RunRecords -> summary path as a live run, the outcome as the log says."""
        result = RunResult(
            run_id=started.run_id,
            exit_code=finished.exit_code,
            signal=finished.signal,
            reason=finished.reason,
            wall_s=finished.wall_s,
            records=records,
            tail=tail[-TAIL_LINES:],
            error_type=finished.error_type,
            error_message=finished.error_message,
        )
        recs = RunRecords.from_records(records, run_end(result, self.stall_s), started.run_id)
        summary = summarize_run(recs, result.exit_code, result.wall_s,
                                self.criteria.compile.warmup_steps)
        report = RunReport(started.run_id, started.role, started.attempt, finished.outcome,
                           result, recs, summary, sort_alarms(alarms), self._cost(result, recs))
        if started.reused_from:  # a reused reference (resumed too): its compute counted there
            report.reused_from, report.cost_usd = dict(started.reused_from), 0.0
        {"reference": self.references, "larger": self.larger}.get(
            started.role, self.candidates).append(report)
        return report

    def summary_text(self, report: RunReport) -> str:
        """What the agent (and a headless log) is told about an attempt."""
        lines = [f"candidate attempt #{report.attempt}: {report.outcome} "
                 f"(exit {report.result.exit_code}, {report.result.wall_s:.1f} s, "
                 f"{report.summary.get('steps')} steps)"]
        if report.result.reason == STOPPED:
            lines.append(f"{report.result.error_message} (portside ended the run there: later "
                         "steps cannot undo this; a failed attempt)")
        elif report.result.error_type or report.result.error_message:
            lines.append(f"error: {report.result.error_type}: {report.result.error_message}")
        metrics = report.summary.get("metrics") or {}
        if metrics:
            lines.append("metrics: " + ", ".join(f"{k}={v}" for k, v in sorted(metrics.items())))
        device = report.summary.get("device") or {}
        if device:
            lines.append("device: " + ", ".join(f"{k}={v}" for k, v in sorted(device.items())
                                                if v not in (None, "", [])))
        if report.alarms:
            lines.append("alarms:")
            lines += [f"- [{a.severity}] {a.kind}: {a.title}" for a in report.alarms]
        else:
            lines.append("alarms: none")
        return "\n".join(lines)
