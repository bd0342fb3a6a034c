"""The session engine: wires agent, review gate, runner and checks, and emits every event.

One engine serves `portside verify` (references, one candidate, verdict from the checks),
`portside run` without an agent (the same, live, with the reviewer able to re-run, abort and
decide), and agent sessions (the agent proposes edits through the gate into its workspace and
asks for candidate runs; the stopping criteria apply; its claim is checked against the alarms).

The agent sees the engine through ``core/session/agent_host.py``; a killed session continues through
``core/session/resume.py``. Every number (cost, human time, attempts, open alarms) comes from the
session's :class:`~portside.core.log.ledger.Ledger`, folded from the same events the store keeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import getpass
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from portside.core.agent.base import AgentAPIError, AgentStopped
from portside.core.checks import Alarm, check_budget, read_evidence
from portside.core.log import events as ev
from portside.core.log.bus import EventBus, Sink
from portside.core.log.criteria import DEFAULT_CRITERIA
from portside.core.log.ledger import Ledger
from portside.core.safety.secrets import redact_command
from portside.core.session.config import INTERRUPTED, SessionConfig, SessionLocked
from portside.core.session.review import ReviewGate
from portside.core.session.verify import CandidateNotStarted, RunReport, Verifier
from portside.core.workspace.git_view import git_repo
from portside.core.workspace.names import WorkspaceError
from portside.core.workspace.workspace import Workspace

if TYPE_CHECKING:
    from portside.core.run.sandbox import Sandbox
    from portside.core.scan.scan import ScanResult
    from portside.core.session.halfway import Resumed


@dataclass
class SessionResult:
    session_id: str
    verdict: str
    outcome: str
    reason: str
    references: list[RunReport]
    candidates: list[RunReport]
    cost: dict[str, Any]
    larger: list[RunReport] = dataclasses.field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        last = self.candidates[-1] if self.candidates else None
        alarms = _alarms_json(last) if last else []
        return {
            "session": self.session_id,
            "verdict": self.verdict,
            "outcome": self.outcome,
            "reason": self.reason,
            "alarms": alarms,
            "reference": [r.to_json() for r in self.references],
            "candidate": last.to_json() if last else None,
            "attempts": [c.to_json() for c in self.candidates],
            # [larger]: each a passed attempt's few steps at the bigger size ("attempt" is its)
            "larger": [{**r.to_json(), "alarms": _alarms_json(r)} for r in self.larger],
            "cost": self.cost,
            **({"divergence": last.localize.get("divergence"), "localize": last.localize}
               if last is not None and last.localize is not None else {}),
        }



def _alarms_json(report: RunReport) -> list[dict[str, Any]]:
    alarms = [a.to_dict() for a in report.alarms]
    for a in alarms:
        a.pop("key", None)
    return alarms


class SessionEngine:
    def __init__(self, config: SessionConfig, sink: Sink | None, session_id: str | None = None,
                 *, resumed: Resumed | None = None):
        self.config = config
        self.criteria = config.criteria or DEFAULT_CRITERIA
        self.session_id = session_id or ev.new_session_id()
        self.bus = EventBus(sink)
        # The ledger learns first, so the gate and the checks see an event's effect at once.
        self.ledger = Ledger()
        self.bus.subscribe(self.ledger.apply)
        self.gate = ReviewGate(self.bus, self.session_id, config.reviewer or None, config.policy,
                               ledger=self.ledger)
        self.workdir = config.workdir or default_workdir(config, self.session_id)
        self.verifier = Verifier(
            self.bus,
            self.session_id,
            self.criteria,
            config.target,
            self.workdir / "probe",
            timeout_s=config.timeout_s,
            stall_s=config.stall_s,
            ledger=self.ledger,
        )
        agent_label = config.agent.label if config.agent else "none"
        self.info: dict[str, Any] = {
            "session_id": self.session_id,
            "project": str(config.project),
            "target": config.target,
            "agent": agent_label,
            "scripted": agent_label.startswith("scripted:"),
            "mode": config.mode,
            "title": config.title or Path(config.project).name,
            "criteria": self.criteria.to_dict(),
            "criteria_file": config.criteria_path or "defaults",
            "banner": config.meta.get("banner", ""),
            "policy": config.policy,
        }
        self.workspace: Workspace | None = None
        self.scan_result: ScanResult | None = None  # the project's, logged at the start
        self.sandbox: Sandbox | None = None  # agent sessions: the runs'; wrap agent commands too
        self.resumed = resumed
        if resumed is not None:
            self.info["resumed"] = True
        self.result: SessionResult | None = None
        self._rerun: asyncio.Queue[str] | None = None  # created on the engine's loop in run()
        self._decided: asyncio.Event | None = None
        self._stop_reason = ""
        self._interrupted = ""  # the stop reason a signal gave, while nobody decided otherwise
        self._lock_fd: int | None = None
        self.gate.hooks.abort = self.verifier.abort
        self.gate.hooks.rerun = self.request_rerun
        self.gate.hooks.verdict = self.set_verdict
        self.gate.hooks.localize = self.request_localize
        self._localizing: set[str] = set()
        self._tasks: set[asyncio.Task[Any]] = set()

    # --- what the reviewer and the host may do -----------------------------------------------

    @property
    def stop_reason(self) -> str:
        return self._stop_reason

    def request_rerun(self) -> None:
        if self._rerun is not None:
            self._rerun.put_nowait("rerun")

    def set_verdict(self, verdict: str, note: str) -> None:
        """The reviewer decided (the intervention is in the ledger already): stop waiting."""
        del verdict, note
        if self._decided is not None:
            self._decided.set()

    def request_localize(self, alarm_id: str) -> str:
        """The reviewer asked where the candidate first diverged, for this alarm: both
        commands run K traced steps in the background; ``alarm.localized`` carries the answer.
        Returns what was started (GateError-worthy problems raise ValueError)."""
        alarm = self.ledger.alarms.get(alarm_id)
        if alarm is None:
            raise ValueError(f"no alarm {alarm_id}")
        if alarm_id in self._localizing:
            raise ValueError(f"{alarm.check}: already being localized")
        run = self.ledger.runs.get(alarm.run_id)
        if run is None or run.role != "candidate":
            raise ValueError(f"{alarm.check} is not about a candidate run: nothing to localize")
        cwd = self.workspace.root if self.workspace is not None else Path(
            self.config.candidate_cwd or self.config.project)
        work = self.workdir / "localize" / f"{alarm.run_id}-{alarm_id}"
        self._localizing.add(alarm_id)

        async def go() -> None:
            from portside.core.localize.runs import localize_for

            try:
                await localize_for(self, alarm_id, alarm.run_id, cwd, work)
            except Exception as exc:  # the answer says why; the session goes on
                self.bus.publish(ev.AlarmLocalized(session_id=self.session_id,
                                                   alarm_id=alarm_id, run_id=alarm.run_id,
                                                   error=f"{type(exc).__name__}: {exc}"))
            finally:
                self._localizing.discard(alarm_id)

        task = asyncio.get_running_loop().create_task(go())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return f"localizing {alarm.check}: both commands run a few traced steps"

    def stop(self, reason: str = "stopped by the reviewer") -> None:
        self._stop_reason = self._stop_reason or reason
        self.verifier.abort()
        if self._decided is not None:
            self._decided.set()

    def interrupt(self, signal_name: str) -> None:
        """A signal ends portside: the live runs are cut off as a kill would cut them (run
        again on resume), and the session ends as ``interrupted``, which resume continues."""
        why = f"portside received {signal_name}"
        if not self._stop_reason:
            self._interrupted = why
            self.verifier.cut_off = f"{why} while this run was live"
        self.stop(why)

    def raise_alarm(self, alarm: Alarm, run_id: str = "") -> ev.AlarmRaised:
        return self.bus.publish(alarm.raised(self.session_id, run_id))  # type: ignore[return-value]

    def budget_alarms(self, extra_attempt: bool = False) -> list[Alarm]:
        """Every stopping criterion reached: attempts made, the ledger's total $ (recorded token
        cost included) and the reviewer's minutes."""
        attempts = self.ledger.attempts
        if not attempts and not extra_attempt:
            return []
        return check_budget(self.criteria.budget, attempts, self.ledger.total_usd,
                            self.ledger.human_minutes)

    async def run_candidate(self, cwd: Path) -> RunReport:
        report = await self.verifier.run_candidate(self.config.candidate, cwd,
                                                   env=self.config.candidate_env)
        if self.criteria.larger.command and report.outcome == "passed" and not self._stop_reason:
            # Only a candidate that passed at its own size is worth a few steps at a bigger one.
            await self.verifier.run_larger(report, cwd, env=self.config.candidate_env)
        if self.config.localize:
            from portside.core.localize.runs import localize_alarm

            await localize_alarm(self, report, cwd)
        return report

    def cost(self) -> dict[str, Any]:
        cost = self.ledger.cost()
        from portside.core.log.performance import larger_inputs, performance

        cost["performance"] = performance(self.ledger)
        cost["larger"] = larger_inputs(self.ledger)
        return cost

    # --- the session -------------------------------------------------------------------------

    def _started(self) -> None:
        c = self.config
        self.bus.publish(
            ev.SessionStarted(
                session_id=self.session_id,
                project=str(c.project),
                target=c.target,
                agent=self.info["agent"],
                title=self.info["title"],
                criteria=self.criteria.to_dict(),
                # Stored without inline secrets (HF_TOKEN=… python train.py → HF_TOKEN=***).
                reference_command=redact_command(c.reference_command),
                candidate_command=redact_command(c.candidate),
                reviewer=self.gate.reviewer or getpass.getuser(),
                mode=c.mode,
                meta={"policy": c.policy, "reference_runs": c.reference_runs,
                      "criteria_file": c.criteria_path, **c.meta,
                      "resume": c.to_log(self.workdir)},
            )
        )

    def lock(self) -> None:
        """One engine per session: a second one (a resume while the first still runs) would
        append with clashing seq. The lock dies with the process, kill -9 included."""
        if self._lock_fd is not None:
            return
        try:
            import fcntl
        except ImportError:  # not POSIX: no guard
            return
        self.workdir.mkdir(parents=True, exist_ok=True)
        path = self.workdir / f"engine-{self.session_id}.lock"  # a given workdir may be shared
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise SessionLocked(f"session {self.session_id} is still running in another portside "
                              f"process (lock {path})") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._lock_fd)
            self._lock_fd = None

    def _restore(self, resumed: Resumed) -> None:
        """Bring this engine to where the killed one stopped, from the log alone (a resume)."""
        from portside.core.log.ledger import ENGINE_KILLED
        from portside.core.run.leftovers import kill_run_processes

        log = resumed.log
        # Everyone who learns from the bus (the ledger, the gate, the screen) sees the past once,
        # without appending it again; a signal's end is not the end any more (the log keeps it).
        for event in log:
            if not isinstance(event, ev.SessionEnded):
                self.bus.deliver_only(event)
        last_end = next((e for e in reversed(log) if isinstance(e, ev.SessionEnded)), None)
        signalled = last_end.reason if last_end is not None and not any(
            isinstance(e, ev.SessionState) and e.state == "resumed" and e.seq > last_end.seq
            for e in log) else ""
        started: dict[str, ev.RunStarted] = {}
        finished: dict[str, ev.RunFinished] = {}
        records: dict[str, list[dict[str, Any]]] = {}
        tails: dict[str, list[str]] = {}
        alarms: dict[str, list[Alarm]] = {}
        for e in log:
            if isinstance(e, ev.RunStarted):
                started[e.run_id] = e
            elif isinstance(e, ev.RunFinished):
                finished[e.run_id] = e
            elif isinstance(e, ev.RunRecord):
                records.setdefault(e.run_id, []).extend(e.records)
            elif isinstance(e, ev.RunOutput):
                tail = tails.setdefault(e.run_id, [])
                tail.extend(e.lines)
                del tail[:-200]
        for a in self.ledger.alarms.values():  # as their evidence last stood (alarm.updated)
            if a.run_id:
                with contextlib.suppress(ValueError):
                    alarms.setdefault(a.run_id, []).append(
                        Alarm(a.check, a.severity, a.title, read_evidence(a.check, a.evidence)))
        for run_id, st in started.items():
            fin = finished.get(run_id)
            if fin is None:
                resumed.interrupted_runs.append(run_id)
                killed = kill_run_processes(self.workdir / "probe" / run_id)
                recs = records.get(run_id, [])
                fin = self.bus.publish(ev.RunFinished(  # type: ignore[assignment]
                    session_id=self.session_id, run_id=run_id, exit_code=None,
                    outcome="aborted", reason=ENGINE_KILLED,
                    wall_s=max(0.0, log[-1].ts - st.ts),
                    steps=sum(1 for r in recs if r.get("type") == "step" and r.get("rank", 0) == 0),
                    error_message="portside was killed while this run was live"
                    + (f"; {killed} leftover process(es) killed on resume" if killed else ""),
                ))
            assert fin is not None
            if st.role == "reference" and fin.outcome == "aborted":
                continue  # an aborted reference never counts: it is run again
            self.verifier.restore_run(st, fin, records.get(run_id, []), tails.get(run_id, []),
                                        alarms.get(run_id, []))
        if self.config.policy == "ask":
            # A pause the reviewer left on stays on; headless nobody could lift it.
            for e in log:
                if isinstance(e, ev.Intervention) and e.action in ("pause", "resume"):
                    self.gate.paused = e.action == "pause"
        refs = len(self.verifier.references)
        refs_left = max(0, self.config.reference_runs - refs)
        n_int = len(resumed.interrupted_runs)
        self.bus.publish(ev.SessionState(
            session_id=self.session_id, state="resumed",
            detail=f"resumed from the log after the engine stopped at seq {log[-1].seq}"
            + (f" ({signalled})" if signalled else "") + ": "
            f"{refs} reference and {len(self.verifier.candidates)} candidate runs restored"
            + (f", {n_int} interrupted run(s) marked aborted" if n_int else "")
            + (f", {refs_left} reference run(s) still to do" if refs_left else ""),
        ))

    def _check_imported_claim(self, claim: str) -> None:
        """The imported agent's last message claimed success and the candidate's checks say
        otherwise: ``agent-claim-contradicted`` (critical), as the live Stop hook raises it."""
        from portside.core.agent.stop_check import claims_success
        from portside.core.checks import agent_claim_contradicted

        errors = [a for a in self.ledger.open_errors() if a.check != "agent-claim-contradicted"]
        if not claim or not errors or not claims_success(claim):
            return
        self.raise_alarm(agent_claim_contradicted(
            claim, [], ", ".join(a.check for a in errors), severity="critical",
            at="imported session's last message",
            open_alarms=[(a.check, a.title) for a in errors]))

    def _decided_already(self) -> bool:
        return bool(self._stop_reason) or self.ledger.verdict is not None

    def _begin(self) -> None:
        """On the engine's loop: the session's start, or its resume from the log, under the
        session's lock. A workdir that cannot be made ends a new session failed, saying why."""
        self._rerun = asyncio.Queue()
        self._decided = asyncio.Event()
        try:
            self.lock()
        except OSError as exc:  # the workdir cannot be made (SessionLocked is no OSError)
            if self.resumed is None:
                self._started()
                self.record_failure(exc)
            raise
        if self.resumed is None:
            self._started()
        else:
            self._restore(self.resumed)

    def _start_references(self, ref_cwd: Path) -> asyncio.Task[list[RunReport]]:
        # Resumed: the references already in the log are not run again.
        return self.verifier.start_references(
            max(0, self.config.reference_runs - len(self.verifier.references)),
            self.config.reference_command, ref_cwd, target=self.config.reference_target,
            env=self.config.reference_env, stop=self._decided_already,
        )

    async def _references(self, ref_cwd: Path) -> None:
        await self._start_references(ref_cwd)

    async def _beside_references(self, ref_cwd: Path, cand_cwd: Path) -> None:
        """Verification with the candidate started while the references run (the verifier
        queues it behind them and judges it as they end)."""
        refs = self._start_references(ref_cwd)
        try:
            if not self._decided_already():
                await self._verification(cand_cwd)
        except CandidateNotStarted:
            pass  # stopped while it waited: no candidate, as when the references ran first
        except BaseException:
            refs.cancel()
            await asyncio.gather(refs, return_exceptions=True)
            raise
        await refs

    async def run(self) -> SessionResult:
        self._begin()
        try:
            await self._scan()
            ref_cwd, cand_cwd = self._prepare_dirs()
            if self.config.agent is None and self.verifier.candidate_overlaps():
                await self._beside_references(ref_cwd, cand_cwd)
            else:
                await self._references(ref_cwd)
                if self._decided_already():
                    pass
                elif self.config.agent is not None:
                    if not (self.resumed and self.resumed.agent_done):
                        await self._agent_session()
                else:
                    await self._verification(cand_cwd)
        except asyncio.CancelledError:
            self._stop_reason = self._stop_reason or "cancelled"
            self._end()
            self._unlock()
            raise
        except Exception as exc:
            self.record_failure(exc)
            self._unlock()
            raise
        result = self._end()
        self._unlock()
        return result

    async def _scan(self) -> None:
        """What in the project will not move as it is, in the log before any run: the screen,
        the report and the agent's task read it. Static (ast, nothing imported), in a thread
        so the screen stays live; a resumed session keeps the scan it logged."""
        from portside.core.scan.scan import Finding, ScanResult, scan

        logged = next((e for e in self.resumed.log if isinstance(e, ev.ProjectScanned)),
                      None) if self.resumed is not None else None
        if logged is not None:
            self.scan_result = ScanResult.from_event(logged)
            return
        project = Path(self.config.project)
        if not project.is_dir():
            return
        try:
            result = await asyncio.to_thread(scan, project)
        except Exception as exc:  # the scan informs the review; it never ends a session
            result = ScanResult(str(project), findings=[Finding(
                ".", 1, "unparsed", "scan failed", f"not scanned: {type(exc).__name__}")])
        self.scan_result = result
        self.bus.publish(result.to_event(self.session_id))

    async def run_references(self) -> None:
        """The reference phase alone, for a study that places it apart from the candidate's
        (core/study/worker.py): the session's start, or its resume from the log, and the
        reference runs still to do; no end: the candidate phase continues the session from
        its log. An error ends the session failed, saying why, and is raised."""
        self._begin()
        try:
            ref_cwd, _ = self._prepare_dirs()
            await self._references(ref_cwd)
        except Exception as exc:
            self.record_failure(exc)
            raise
        finally:
            self._unlock()

    def record_failure(self, exc: Exception) -> None:
        """The engine failed: recorded as the session's end, so `show`, replay and the screen
        (and a study's status) can say why."""
        self._stop_reason = f"engine failed: {type(exc).__name__}: {exc}"
        self._end()

    def _prepare_dirs(self) -> tuple[Path, Path]:
        project = Path(self.config.project)
        if not self.config.isolate:
            return project, Path(self.config.candidate_cwd or project)
        self.workdir.mkdir(parents=True, exist_ok=True)
        pristine = self.workdir / "reference"
        done = self.workdir / "reference.copied"  # a copy cut short by a kill is made again
        if pristine.exists() and not done.exists():
            shutil.rmtree(pristine)
        secrets = self.criteria.sandbox.secrets
        if not pristine.exists():
            Workspace.pristine_copy(project, pristine, secrets=secrets)
            done.touch()
        home = self.workdir / "workspaces" / self.session_id
        self.workspace = None
        if self.resumed is not None and home.exists():
            try:
                self.workspace = Workspace.open(home)  # the agent's edits so far are in it
            except WorkspaceError:
                if any(isinstance(e, ev.EditApplied) for e in self.resumed.log):
                    raise
                shutil.rmtree(home)  # created half-way before the kill; nothing of value in it
        if self.workspace is None:
            self.workspace = Workspace.create(project, self.workdir / "workspaces",
                                              name=self.session_id, secrets=secrets)
        self._confine_runs()
        return pristine, self.workspace.root

    def _confine_runs(self) -> None:
        """Agent sessions: every run in the sandbox (or, where none, say so on screen)."""
        from portside.core.run.sandbox import limits_of, register_workspace, session_sandbox

        assert self.workspace is not None
        c = session_sandbox(self.config.project, self.config.work_root or self.workdir,
                            network=self.criteria.sandbox.network, wanted=self.config.sandbox,
                            policy=self.config.policy,
                            # The demo's recording and code ship with portside: not refused.
                            has_agent=self.config.agent is not None and self.config.mode != "demo",
                            writable=[self.workspace.tree], withheld=self.workspace.withheld,
                            limits=limits_of(self.criteria.sandbox),
                            readable=self.criteria.sandbox.readable)
        self.sandbox = c.sandbox
        register_workspace(self.workspace.tree, c.sandbox)  # the agent's commands: wrap_shell
        self.verifier.runner.use_sandbox(c.sandbox)
        self.bus.publish(ev.SessionState(session_id=self.session_id, state=c.state,
                                         detail=c.detail))
        self._stop_reason = self._stop_reason or c.refused

    async def _verification(self, cwd: Path) -> None:
        from portside.core.log.ledger import ENGINE_KILLED

        done = [c for c in self.verifier.candidates if c.outcome != "aborted"
                or c.result.reason != ENGINE_KILLED]
        if not done:
            await self.run_candidate(cwd)
            if self.config.claim:
                self._check_imported_claim(self.config.claim)
        if self.config.policy == "ask":
            # Live without an agent: the reviewer may re-run, abort, and gives the verdict.
            assert self._decided is not None and self._rerun is not None
            while not self._stop_reason and self.ledger.verdict is None:
                if self.config.agent is None:
                    self.gate.verdict_waits()  # the reviewer's attention counts from here
                waiter = asyncio.create_task(self._decided.wait())
                rerun = asyncio.create_task(self._rerun.get())
                finished, pending = await asyncio.wait({waiter, rerun},
                                                       return_when=asyncio.FIRST_COMPLETED)
                for task in pending:
                    task.cancel()
                self.gate.verdict_waits(False)
                if waiter in finished:
                    break
                await self.run_candidate(cwd)

    def _end(self) -> SessionResult:
        cands = self.verifier.candidates
        last = cands[-1] if cands else None
        errors = self.ledger.open_errors()
        if self.ledger.verdict is not None:
            verdict, note = self.ledger.verdict
            reason = f"reviewer: {note}".rstrip(": ")
        elif self._stop_reason:
            verdict, reason = "fail", self._stop_reason
        elif last is None:
            verdict, reason = "fail", "no candidate run"
        elif errors:
            verdict = "fail"
            reason = "; ".join(sorted({f"{a.check}" for a in errors}))
        elif last.outcome != "passed":
            verdict, reason = "fail", f"candidate {last.outcome}"
        else:
            verdict, reason = "pass", "no error alarm"
        outcome = last.outcome if last else "failed-error"
        if self._interrupted and self._stop_reason == self._interrupted \
                and self.ledger.verdict is None:
            outcome = INTERRUPTED
        cost = self.cost()
        self.bus.publish(ev.SessionEnded(session_id=self.session_id, verdict=verdict,  # type: ignore[arg-type]
                                         outcome=outcome, reason=reason))
        self.result = SessionResult(self.session_id, verdict, outcome, reason,
                                    list(self.verifier.references), list(cands), cost,
                                    list(self.verifier.larger))
        return self.result

    # --- agent sessions ----------------------------------------------------------------------

    async def _agent_session(self) -> None:
        from portside.core.session.agent_host import EngineHost

        agent = self.config.agent
        assert agent is not None
        host = EngineHost(self)
        if self.resumed is not None:
            agent.restore(self.resumed.log, host)
        while not self._stop_reason:
            try:
                await agent.run(host)
                return
            except AgentStopped:
                return
            except AgentAPIError as exc:
                # Nothing is lost: the agent keeps its conversation. A reviewer resumes (space)
                # and the agent continues; with nobody to ask, the session ends failed.
                if self.config.policy != "ask":
                    self._stop_reason = f"agent API error: {exc}"
                    return
                self.gate.paused = True
                self.bus.publish(ev.SessionState(
                    session_id=self.session_id, state="paused",
                    detail=f"agent API error: {exc} — press space to resume"))
                await self.gate.wait_if_paused()

    def stop_agent(self, reason: str) -> None:
        """The host ends the agent's part (budget refused): the session ends failed."""
        self._stop_reason = self._stop_reason or reason


def default_workdir(config: SessionConfig, session_id: str) -> Path:
    """Durable beside the database when the CLI says where; else a temp dir. Never inside the
    project: its tree is never written."""
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"portside-{session_id}"
    if config.work_root is None:
        return tmp
    wd = Path(os.path.abspath(config.work_root)) / session_id
    real = os.path.realpath(wd)
    # The workspace refuses a root inside the project's git checkout, not only its folder.
    project = os.path.realpath(config.project)
    guards = {project}
    repo = git_repo(Path(project)) if os.path.isdir(project) else None
    if repo:
        guards.add(str(repo[0]))
    if any(os.path.commonpath([real, g]) == g for g in guards):
        return tmp
    return wd
