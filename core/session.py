"""The session engine: wires agent, review gate, runner and checks, and emits every event.

One engine serves `portside verify` (references, one candidate, verdict from the checks),
`portside run` without an agent (the same, live, with the reviewer able to re-run, abort and
decide), and agent sessions (the agent proposes edits through the gate into its workspace and
asks for candidate runs; the stopping criteria apply; its claim is checked against the alarms).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import getpass
import hashlib
import os
import shutil
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import events as ev
from .agent.base import Agent, AgentAPIError, AgentStopped, EditOutcome
from .bus import EventBus, Sink
from .checks import agent_claim_contradicted, check_budget
from .costs import load_prices, session_cost
from .criteria import Criteria, CriteriaError, PatternError, compile_pattern, parse_criteria
from .review import Decision, Policy, ReviewGate
from .secrets import redact_command
from .textsafe import clean_line
from .verify import RunReport, Verifier
from .workspace import Edit, Workspace, WorkspaceError

RESUME_VERSION = 1
ENGINE_KILLED = "engine-killed"


class ResumeError(RuntimeError):
    """A session that cannot be resumed (ended, recorded without resume data, still running)."""


@dataclass
class SessionConfig:
    project: Path
    target: str
    reference_command: str
    candidate_command: str | None = None  # defaults to the reference command
    criteria: Criteria | None = None
    criteria_path: str = ""
    reference_runs: int = 2
    reference_target: str = "cpu"
    timeout_s: float | None = None
    stall_s: float | None = None
    agent: Agent | None = None
    policy: Policy = "auto"
    mode: str = "verify"  # verify | live | headless | demo
    workdir: Path | None = None  # probe files, workspace, pristine copy
    # Where per-session workdirs go (workdir = work_root/<session id>) when workdir is unset:
    # the CLI passes <db dir>/work, so a killed session's workspace outlives reboots.
    work_root: Path | None = None
    isolate: bool = False  # runs in copies of the project (agent sessions), not in it
    reviewer: str = ""
    title: str = ""
    reference_env: dict[str, str] | None = None
    candidate_env: dict[str, str] | None = None
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class SessionResult:
    session_id: str
    verdict: str
    outcome: str
    reason: str
    references: list[RunReport]
    candidates: list[RunReport]
    cost: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        last = self.candidates[-1] if self.candidates else None
        alarms = [a.to_dict() for a in last.alarms] if last else []
        for a in alarms:
            a.pop("key", None)
        return {
            "session": self.session_id,
            "verdict": self.verdict,
            "outcome": self.outcome,
            "reason": self.reason,
            "alarms": alarms,
            "reference": [r.to_json() for r in self.references],
            "candidate": last.to_json() if last else None,
            "attempts": [c.to_json() for c in self.candidates],
            "cost": self.cost,
        }


class SessionEngine:
    def __init__(self, config: SessionConfig, sink: Sink | None, session_id: str | None = None):
        from .criteria import DEFAULT_CRITERIA

        self.config = config
        self.criteria = config.criteria or DEFAULT_CRITERIA
        self.session_id = session_id or ev.new_session_id()
        self.bus = EventBus(sink)
        self.gate = ReviewGate(self.bus, self.session_id, config.reviewer or None, config.policy)
        self.workdir = config.workdir or _default_workdir(config, self.session_id)
        self.verifier = Verifier(
            self.bus,
            self.session_id,
            self.criteria,
            config.target,
            self.workdir / "probe",
            timeout_s=config.timeout_s,
            stall_s=config.stall_s,
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
        self._rerun: asyncio.Queue[str] | None = None  # created on the engine's loop in run()
        self._usage: list[tuple[str, int, int]] = []
        self._human_s = 0.0
        self._verdict: tuple[str, str] | None = None
        self._stop_reason = ""
        self._decided: asyncio.Event | None = None
        self.result: SessionResult | None = None
        self._log: list[ev.Event] | None = None  # set by from_log: run() resumes from it
        self._lock_fd: int | None = None
        self._pending_claim: ev.AgentClaimed | None = None  # a claim the kill left unanswered
        self._interrupted_edit: tuple[ev.EditProposed, ev.EditDecided | None, bool] | None = None
        self._agent_done = False  # the log shows the agent's claim was answered
        self.gate.hooks.abort = self.verifier.abort
        self.gate.hooks.rerun = self._request_rerun
        self.gate.hooks.verdict = self._reviewer_verdict
        self.bus.subscribe(self._account)

    def _account(self, event: ev.Event) -> None:
        if isinstance(event, ev.AgentUsage):
            self._usage.append((event.model, event.input_tokens, event.output_tokens))
        elif isinstance(event, ev.Intervention) and not event.during_replay:
            self._human_s += max(0.0, event.decided_at - event.attention_started_at)

    # --- reviewer hooks ----------------------------------------------------------------------

    def _request_rerun(self) -> None:
        if self._rerun is not None:
            self._rerun.put_nowait("rerun")

    def _reviewer_verdict(self, verdict: str, note: str) -> None:
        self._verdict = (verdict, note)
        if self._decided is not None:
            self._decided.set()

    def stop(self, reason: str = "stopped by the reviewer") -> None:
        self._stop_reason = reason
        self.verifier.abort()
        if self._decided is not None:
            self._decided.set()

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
                candidate_command=redact_command(c.candidate_command or c.reference_command),
                reviewer=self.gate.reviewer or getpass.getuser(),
                mode=c.mode,
                meta={"policy": c.policy, "reference_runs": c.reference_runs,
                      "criteria_file": c.criteria_path, **c.meta,
                      "resume": self._resume_meta()},
            )
        )

    def _resume_meta(self) -> dict[str, Any]:
        """What `portside run --resume` needs and cannot derive from the other events. No
        secrets: environments are scrubbed like a run's, the API key is read again at resume."""
        from .runner import scrub_env

        c = self.config
        toml = None
        if c.criteria_path:
            with contextlib.suppress(OSError, UnicodeDecodeError):
                toml = Path(c.criteria_path).read_text(encoding="utf-8")
        return {
            "version": RESUME_VERSION,
            "agent": agent_spec(c.agent),
            "policy": c.policy,
            "reference_runs": c.reference_runs,
            "reference_target": c.reference_target,
            "timeout_s": c.timeout_s,
            "stall_s": c.stall_s,
            "isolate": c.isolate,
            "workdir": str(Path(os.path.abspath(self.workdir))),
            "criteria_path": c.criteria_path,
            "criteria_toml": toml,
            "reference_env": scrub_env(c.reference_env) if c.reference_env is not None else None,
            "candidate_env": scrub_env(c.candidate_env) if c.candidate_env is not None else None,
            "reviewer": c.reviewer,
            "meta": dict(c.meta),
        }

    # --- resuming a killed session -------------------------------------------------------------

    @classmethod
    def from_log(cls, events: list[ev.Event], sink: Sink | None, *, policy: Policy | None = None,
                 mode: str | None = None) -> SessionEngine:
        """An engine that continues the session whose log is ``events`` (``run()`` resumes)."""
        if not events or not isinstance(events[0], ev.SessionStarted):
            raise ResumeError("the log does not start with session.started")
        started = events[0]
        sid = started.session_id
        if any(isinstance(e, ev.SessionEnded) for e in events):
            raise ResumeError(f"session {sid} has already ended; there is nothing to resume")
        r = started.meta.get("resume")
        if not isinstance(r, dict) or r.get("version") != RESUME_VERSION:
            raise ResumeError(f"session {sid} was recorded without the data resuming needs "
                              "(an older portside); it cannot be resumed")
        criteria = None
        if r.get("criteria_toml"):
            try:
                criteria = parse_criteria(r["criteria_toml"], r.get("criteria_path") or "<log>")
            except CriteriaError as exc:
                raise ResumeError(f"criteria recorded in the log: {exc}") from None
        elif started.criteria:
            criteria = criteria_from_dict(started.criteria)
        config = SessionConfig(
            project=Path(started.project),
            target=started.target,
            reference_command=started.reference_command,
            candidate_command=started.candidate_command or None,
            criteria=criteria,
            criteria_path=r.get("criteria_path") or "",
            reference_runs=int(r.get("reference_runs") or 0),
            reference_target=r.get("reference_target") or "cpu",
            timeout_s=r.get("timeout_s"),
            stall_s=r.get("stall_s"),
            agent=agent_from_spec(r.get("agent")),
            policy=policy or r.get("policy") or "auto",
            mode=mode or started.mode,
            workdir=Path(r["workdir"]),
            isolate=bool(r.get("isolate")),
            reviewer=r.get("reviewer") or "",
            title=started.title,
            reference_env=r.get("reference_env"),
            candidate_env=r.get("candidate_env"),
            meta=dict(r.get("meta") or {}),
        )
        engine = cls(config, sink, session_id=sid)
        engine._log = list(events)
        engine.info["resumed"] = True
        return engine

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
            raise ResumeError(f"session {self.session_id} is still running in another portside "
                              f"process (lock {path})") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._lock_fd)
            self._lock_fd = None

    def _restore(self, log: list[ev.Event]) -> None:
        """Bring the engine to where the killed one stopped, from the log alone."""
        # Everyone who learns from the bus (gate: alarms; accounting: tokens, human time; the
        # screen) sees the past once, without appending it again.
        for event in log:
            self.bus.deliver_only(event)
        started: dict[str, ev.RunStarted] = {}
        finished: dict[str, ev.RunFinished] = {}
        records: dict[str, list[dict[str, Any]]] = {}
        tails: dict[str, list[str]] = {}
        alarms: dict[str, list[Any]] = {}
        from .checks import Alarm

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
            elif isinstance(e, ev.AlarmRaised) and e.run_id:
                with contextlib.suppress(ValueError):
                    alarms.setdefault(e.run_id, []).append(
                        Alarm(e.check, e.severity, e.title, e.evidence))
            elif isinstance(e, ev.Intervention) and e.action == "verdict":
                verdict, _, note = e.note.partition(":")
                if verdict in ("pass", "fail"):
                    self._verdict = (verdict, note.strip())
        interrupted = []
        for run_id, st in started.items():
            fin = finished.get(run_id)
            if fin is None:
                interrupted.append(run_id)
                killed = _kill_run_processes(self.workdir / "probe" / run_id)
                recs = records.get(run_id, [])
                fin = self.bus.publish(ev.RunFinished(  # type: ignore[assignment]
                    session_id=self.session_id, run_id=run_id, exit_code=None,
                    outcome="aborted", reason=ENGINE_KILLED,
                    wall_s=max(0.0, log[-1].ts - st.ts),
                    steps=sum(1 for r in recs if r.get("type") == "step"
                              and r.get("rank", 0) == 0),
                    error_message="portside was killed while this run was live"
                    + (f"; {killed} leftover process(es) killed on resume" if killed else ""),
                ))
                if st.role == "reference":
                    continue  # an unfinished reference is run again, not counted
            assert fin is not None
            self.verifier.restore_run(st, fin, records.get(run_id, []), tails.get(run_id, []),
                                      alarms.get(run_id, []))
        self._restore_agent_state(log)
        if self.config.policy == "ask":
            # A pause the reviewer left on stays on; headless nobody could lift it.
            for e in log:
                if isinstance(e, ev.Intervention) and e.action in ("pause", "resume"):
                    self.gate.paused = e.action == "pause"
        refs_left = max(0, self.config.reference_runs - len(self.verifier.references))
        self.bus.publish(ev.SessionState(
            session_id=self.session_id, state="resumed",
            detail=f"resumed from the log after the engine stopped at seq {log[-1].seq}: "
            f"{len(self.verifier.references)} reference and {len(self.verifier.candidates)} "
            f"candidate runs restored"
            + (f", {len(interrupted)} interrupted run(s) marked aborted" if interrupted else "")
            + (f", {refs_left} reference run(s) still to do" if refs_left else ""),
        ))

    def _restore_agent_state(self, log: list[ev.Event]) -> None:
        """An edit or a claim the kill left half-way, so the reviewer's answer is not lost."""
        results = {e.call_id for e in log if isinstance(e, ev.AgentToolResult)}
        last_call = next((e for e in reversed(log) if isinstance(e, ev.AgentToolCall)), None)
        if last_call is None or last_call.call_id in results:
            if any(isinstance(e, ev.AgentClaimed) for e in log) and last_call is not None \
                    and last_call.name == "finish":
                self._agent_done = True  # the claim was answered; only the end is missing
            return
        after = [e for e in log if e.seq > last_call.seq]
        if last_call.name == "finish":
            self._pending_claim = next(
                (e for e in after if isinstance(e, ev.AgentClaimed)), None)
        elif last_call.name in ("propose_edit", "write_file"):
            proposed = next((e for e in after if isinstance(e, ev.EditProposed)), None)
            if proposed is not None:
                decided = next((e for e in after if isinstance(e, ev.EditDecided)
                                and e.edit_id == proposed.edit_id), None)
                applied = any(isinstance(e, ev.EditApplied) and e.edit_id == proposed.edit_id
                              for e in after)
                self._interrupted_edit = (proposed, decided, applied)

    async def run(self) -> SessionResult:
        self._rerun = asyncio.Queue()
        self._decided = asyncio.Event()
        self.lock()
        if self._log is None:
            self._started()
        else:
            self._restore(self._log)
        try:
            ref_cwd, cand_cwd = self._prepare_dirs()
            # Resumed: the references already in the log are not run again.
            for _ in range(max(0, self.config.reference_runs - len(self.verifier.references))):
                if self._stop_reason or self._verdict:
                    break
                await self.verifier.run_reference(
                    self.config.reference_command, ref_cwd,
                    target=self.config.reference_target, env=self.config.reference_env,
                )
            if self._stop_reason or self._verdict:
                pass
            elif self.config.agent is not None:
                if not self._agent_done:
                    await self._agent_session()
            else:
                await self._verification(cand_cwd)
        except asyncio.CancelledError:
            self._stop_reason = self._stop_reason or "cancelled"
            self._end()
            self._unlock()
            raise
        result = self._end()
        self._unlock()
        return result

    def _prepare_dirs(self) -> tuple[Path, Path]:
        project = Path(self.config.project)
        if not self.config.isolate:
            return project, project
        self.workdir.mkdir(parents=True, exist_ok=True)
        pristine = self.workdir / "reference"
        done = self.workdir / "reference.copied"  # a copy cut short by a kill is made again
        if pristine.exists() and not done.exists():
            shutil.rmtree(pristine)
        if not pristine.exists():
            Workspace.pristine_copy(project, pristine)
            done.touch()
        home = self.workdir / "workspaces" / self.session_id
        self.workspace = None
        if self._log is not None and home.exists():
            try:
                self.workspace = Workspace.open(home)  # the agent's edits so far are in it
            except WorkspaceError:
                if any(isinstance(e, ev.EditApplied) for e in self._log):
                    raise
                shutil.rmtree(home)  # created half-way before the kill; nothing of value in it
        if self.workspace is None:
            self.workspace = Workspace.create(project, self.workdir / "workspaces",
                                              name=self.session_id)
        return pristine, self.workspace.root

    async def _candidate(self, cwd: Path) -> RunReport:
        return await self.verifier.run_candidate(
            self.config.candidate_command or self.config.reference_command,
            cwd,
            env=self.config.candidate_env,
        )

    async def _verification(self, cwd: Path) -> None:
        done = [c for c in self.verifier.candidates if c.outcome != "aborted"
                or c.result.reason != ENGINE_KILLED]
        if not done:
            await self._candidate(cwd)
        if self.config.policy == "ask":
            # Live without an agent: the reviewer may re-run, abort, and gives the verdict.
            while not self._stop_reason:
                waiter = asyncio.create_task(self._decided.wait())  # type: ignore[union-attr]
                rerun = asyncio.create_task(self._rerun.get())  # type: ignore[union-attr]
                done, pending = await asyncio.wait({waiter, rerun},
                                                   return_when=asyncio.FIRST_COMPLETED)
                for task in pending:
                    task.cancel()
                if waiter in done:
                    break
                await self._candidate(cwd)

    def _end(self) -> SessionResult:
        cands = self.verifier.candidates
        last = cands[-1] if cands else None
        errors = self.gate.open_errors()
        if self._verdict is not None:
            verdict, reason = self._verdict[0], f"reviewer: {self._verdict[1]}".rstrip(": ")
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
        cost = self._cost()
        self.bus.publish(ev.SessionEnded(session_id=self.session_id, verdict=verdict,  # type: ignore[arg-type]
                                         outcome=outcome, reason=reason))
        self.result = SessionResult(self.session_id, verdict, outcome, reason,
                                    list(self.verifier.references), list(cands), cost)
        return self.result

    def _cost(self) -> dict[str, Any]:
        from .costs import AttemptCost, TokenUse

        try:
            table = load_prices(self.criteria.price_overrides)
            attempts = [
                AttemptCost(usd=r.cost_usd or 0.0, passed=r.outcome == "passed", role=r.role)
                for r in [*self.verifier.references, *self.verifier.candidates]
            ]
            tokens = [TokenUse(model=m, tokens_in=i, tokens_out=o) for m, i, o in self._usage]
            cost = session_cost(attempts, tokens, self._human_minutes(), table)
            cost["candidate_vs_reference"] = self._compare()
            return cost
        except Exception as exc:  # cost accounting never breaks a verdict
            return {"error": f"cost accounting failed: {exc}"}

    def _human_minutes(self) -> float:
        return self._human_s / 60.0

    def _compare(self) -> dict[str, Any] | None:
        """The study's "N× faster, M% cheaper": last candidate vs the mean passed reference,
        whole runs (wall time and device cost)."""
        from .costs import compare

        refs = [r for r in self.verifier.references if r.outcome == "passed"]
        cands = self.verifier.candidates
        if not refs or not cands or cands[-1].outcome != "passed":
            return None
        ref_s = sum(r.result.wall_s for r in refs) / len(refs)
        ref_usd = sum(r.cost_usd or 0.0 for r in refs) / len(refs)
        cand = cands[-1]
        return compare(ref_s, ref_usd, cand.result.wall_s, cand.cost_usd or 0.0)

    # --- agent sessions ----------------------------------------------------------------------

    async def _agent_session(self) -> None:
        assert self.config.agent is not None
        host = EngineHost(self)
        restore = getattr(self.config.agent, "restore", None)
        if self._log is not None and restore is not None:
            restore(self._log, host)
        while not self._stop_reason:
            try:
                await self.config.agent.run(host)
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


class EngineHost:
    """The engine as the agent sees it (core/agent/base.py: AgentHost)."""

    def __init__(self, engine: SessionEngine) -> None:
        self.engine = engine
        self.session_id = engine.session_id
        assert engine.workspace is not None
        self.workspace = engine.workspace
        self.claimed = False
        c = engine.config
        cr = engine.criteria
        self.task = "\n".join([
            f"Port the project in this workspace to target `{c.target}` "
            f"(torch_xla, or TorchTPU where the target is a TPU and it is installed).",
            f"Reference command (runs unchanged, on {c.reference_target}): {c.reference_command}",
            f"Candidate command (run in your workspace): {c.candidate_command or c.reference_command}",
            f"Acceptance: goal metric {cr.goal.metric or '(none)'} within {cr.goal.tolerance} of "
            f"the reference ({cr.goal.direction}); drift checked on {', '.join(cr.drift.series)}; "
            f"no recompilation after step {cr.compile.warmup_steps}; "
            f"at most {cr.budget.max_attempts or 'unlimited'} candidate attempts.",
        ])

    def publish(self, event: ev.Event) -> ev.Event:
        return self.engine.bus.publish(event)

    def _interrupted(self, path: str) -> tuple[ev.EditProposed, ev.EditDecided | None, bool] | None:
        """The edit a kill cut off, if this call is making it again (taken once)."""
        found, self.engine._interrupted_edit = self.engine._interrupted_edit, None
        try:
            same = found is not None and self.workspace.relpath(path) == found[0].path
        except WorkspaceError:
            same = False
        return found if same else None

    def _already_applied(self, found: tuple[ev.EditProposed, ev.EditDecided | None, bool]
                         ) -> EditOutcome | None:
        proposed, decided, applied = found
        text = decided.after if decided is not None and decided.decision == "edited" else None
        try:
            if not applied or self.workspace.read_file(proposed.path) != (text or proposed.after):
                return None
        except WorkspaceError:
            return None
        msg = "applied as proposed" if text is None else "applied with the reviewer's changes"
        return EditOutcome("applied", proposed.edit_id, msg, applied_text=text)

    async def _review(self, edit: Edit, rationale: str,
                      found: tuple[ev.EditProposed, ev.EditDecided | None, bool] | None = None
                      ) -> EditOutcome:
        e = self.engine
        prior = found[1] if found and (found[0].before, found[0].after) == (edit.before,
                                                                              edit.after) else None
        if prior is not None:
            # Decided before the kill: the reviewer's answer stands, they are not asked again.
            edit = dataclasses.replace(edit, edit_id=prior.edit_id)
            action = {"approved": "approve", "rejected": "reject", "edited": "edit"}[prior.decision]
            decision = Decision(action, note=prior.reason, after=prior.after, by=prior.by)  # type: ignore[arg-type]
        else:
            proposed = e.bus.publish(
                ev.EditProposed(session_id=e.session_id, edit_id=edit.edit_id, path=edit.path,
                                before=edit.before, after=edit.after, rationale=rationale)
            )
            decision = await e.gate.review_edit(proposed)  # type: ignore[arg-type]
        if decision.action == "reject":
            return EditOutcome("rejected", edit.edit_id, decision.note)
        try:
            applied = self.workspace.apply(edit, after=decision.after)
        except WorkspaceError as exc:
            return EditOutcome("failed", edit.edit_id, str(exc))
        e.bus.publish(ev.EditApplied(session_id=e.session_id, edit_id=edit.edit_id,
                                     path=edit.path))
        text = applied.after if decision.action == "edit" else None
        msg = "applied as proposed" if text is None else "applied with the reviewer's changes"
        return EditOutcome("applied", edit.edit_id, msg, applied_text=text)

    async def propose_replace(self, path: str, old: str, new: str, rationale: str) -> EditOutcome:
        found = self._interrupted(path)
        if found and (done := self._already_applied(found)):
            return done
        try:
            edit = self.workspace.propose_replace(path, old, new)
        except WorkspaceError as exc:
            return EditOutcome("failed", "", str(exc))
        return await self._review(edit, rationale, found)

    async def propose_write(self, path: str, content: str, rationale: str) -> EditOutcome:
        found = self._interrupted(path)
        if found and (done := self._already_applied(found)):
            return done
        try:
            edit = self.workspace.propose_write(path, content)
        except WorkspaceError as exc:
            return EditOutcome("failed", "", str(exc))
        return await self._review(edit, rationale, found)

    async def run_reference(self) -> str:
        e = self.engine
        pristine = e.workdir / "reference"
        report = await e.verifier.run_reference(e.config.reference_command, pristine,
                                                target=e.config.reference_target,
                                                env=e.config.reference_env)
        return f"reference run #{report.attempt}: {report.outcome}, {report.summary.get('steps')} steps, metrics {report.summary.get('metrics')}"

    async def run_candidate(self) -> str:
        e = self.engine
        await self.checkpoint()
        budget = self._budget_alarms(extra_attempt=True)
        if budget:
            await self._budget_stop(budget)
        report = await e._candidate(self.workspace.root)
        return e.verifier.summary_text(report)

    def _budget_alarms(self, extra_attempt: bool = False) -> list[Any]:
        e = self.engine
        attempts = len(e.verifier.candidates) + (1 if extra_attempt else 0)
        spent = float(e._cost().get("total_usd") or 0.0)
        return check_budget(e.criteria.budget, attempts - (1 if extra_attempt else 0),
                            spent, e._human_minutes()) if attempts else []

    async def _budget_stop(self, alarms: list[Any]) -> None:
        e = self.engine
        alarm = alarms[0]
        raised = e.bus.publish(ev.AlarmRaised(session_id=e.session_id, alarm_id=ev.new_id("al-"),
                                              check=alarm.kind, severity=alarm.severity,
                                              title=alarm.title, evidence=alarm.evidence))
        decision = await e.gate.review_budget(raised)  # type: ignore[arg-type]
        if decision.action != "approve":
            e._stop_reason = f"budget exhausted: {alarm.title}"
            raise AgentStopped(e._stop_reason)

    def read_run_log(self, run: str = "last", tail: int = 50, grep: str | None = None) -> str:
        e = self.engine
        reports = [*e.verifier.references, *e.verifier.candidates]
        if not reports:
            return "no run yet"
        if run == "last":
            report = reports[-1]
        else:
            found = [r for r in reports if r.run_id == run]
            if not found:
                return f"no run {run!r}; runs: {', '.join(r.run_id for r in reports)}"
            report = found[0]
        lines = [clean_line(x) for x in report.result.tail]
        if grep:
            try:
                rx = compile_pattern(grep)  # the agent's regex: RE2, linear time
            except PatternError as exc:
                return f"bad regex {grep!r}: {exc}"
            lines = [x for x in lines if rx.search(x)]
        return "\n".join(lines[-max(1, min(tail, 500)):]) or "(no matching lines)"

    async def claim(self, summary: str) -> str:
        e = self.engine
        pending, e._pending_claim = e._pending_claim, None
        if pending is not None and pending.summary == summary:
            claim = pending  # made before the kill and still unanswered: answered now, once
        else:
            claim = e.bus.publish(ev.AgentClaimed(session_id=e.session_id, summary=summary))
        raised = any(a.check == "agent-claim-contradicted" and a.seq > claim.seq
                     for a in e.gate.alarms.values())
        errors = e.gate.open_errors()
        if not e.verifier.candidates:
            errors_text = "no candidate run was made"
        else:
            errors_text = ""
        if (errors or errors_text) and not raised:
            contradicted = agent_claim_contradicted(summary, [], errors_text or
                                                    ", ".join(a.check for a in errors))
            # Critical: the failure the study found hardest to see (success claimed, accuracy lost).
            e.bus.publish(ev.AlarmRaised(
                session_id=e.session_id, alarm_id=ev.new_id("al-"), check=contradicted.kind,
                severity="critical", title=contradicted.title,
                evidence={**contradicted.evidence,
                          "open_alarms": [{"check": a.check, "title": a.title} for a in errors]}))
        decision = await e.gate.review_claim(claim)  # type: ignore[arg-type]
        if decision.by == "reviewer" and decision.action in ("pass", "fail"):
            e._verdict = (decision.action, decision.note)
        self.claimed = True
        raise AgentStopped("claimed")

    def take_messages(self) -> list[str]:
        return self.engine.gate.take_messages()

    async def checkpoint(self) -> None:
        e = self.engine
        await e.gate.wait_if_paused()
        if e._stop_reason:
            raise AgentStopped(e._stop_reason)



# --- what resuming needs ---------------------------------------------------------------------


def _default_workdir(config: SessionConfig, session_id: str) -> Path:
    """Durable beside the database when the CLI says where; else a temp dir. Never inside the
    project: its tree is never written."""
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"portside-{session_id}"
    if config.work_root is None:
        return tmp
    wd = Path(os.path.abspath(config.work_root)) / session_id
    project = os.path.realpath(config.project)
    real = os.path.realpath(wd)
    if os.path.commonpath([real, project]) == project:
        return tmp
    return wd


def agent_spec(agent: Agent | None) -> dict[str, Any] | None:
    """How to build the agent again: scripted (path, speed, content hash) or claude (model)."""
    if agent is None:
        return None
    path = getattr(agent, "path", None)
    if agent.label.startswith("scripted:") and path is not None:
        p = Path(os.path.abspath(path))
        digest = ""
        with contextlib.suppress(OSError):
            digest = hashlib.sha256(p.read_bytes()).hexdigest()
        return {"kind": "scripted", "path": str(p), "speed": getattr(agent, "speed", 1.0),
                "sha256": digest}
    if agent.label.startswith("claude:"):
        return {"kind": "claude", "model": getattr(agent, "model", agent.label[7:]),
                "max_turns": getattr(agent, "max_turns", None)}
    return {"kind": "other", "label": agent.label}


def agent_from_spec(spec: dict[str, Any] | None) -> Agent | None:
    if spec is None:
        return None
    kind = spec.get("kind")
    if kind == "scripted":
        from .agent.scripted import ScriptedAgent

        path = Path(spec["path"])
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ResumeError(f"the recorded agent {path} is gone: {exc}") from None
        if spec.get("sha256") and hashlib.sha256(data).hexdigest() != spec["sha256"]:
            raise ResumeError(f"the recorded agent {path} changed since the session started; "
                              "its steps no longer line up with the log")
        return ScriptedAgent(path, speed=float(spec.get("speed", 1.0)))
    if kind == "claude":
        from .agent.claude import ClaudeAgent

        kwargs = {"max_turns": spec["max_turns"]} if spec.get("max_turns") else {}
        return ClaudeAgent(model=spec["model"], **kwargs)
    raise ResumeError(f"agent {spec.get('label') or kind!r} cannot be rebuilt from the log")


def criteria_from_dict(data: dict[str, Any]) -> Criteria:
    """Criteria.to_dict() back to Criteria (sessions started without a criteria file)."""
    from . import criteria as cr

    def build(cls: type, values: dict[str, Any]) -> Any:
        kwargs = {}
        for f in dataclasses.fields(cls):
            if f.name in values:
                v = values[f.name]
                kwargs[f.name] = tuple(v) if isinstance(v, list) else v
        return cls(**kwargs)

    return Criteria(
        goal=build(cr.GoalCriteria, data.get("goal", {})),
        drift=build(cr.DriftCriteria, data.get("drift", {})),
        compile=build(cr.CompileCriteria, data.get("compile", {})),
        performance=build(cr.PerformanceCriteria, data.get("performance", {})),
        hardware=build(cr.HardwareCriteria, data.get("hardware", {})),
        budget=build(cr.BudgetCriteria, data.get("budget", {})),
        prices=tuple(sorted((data.get("prices") or {}).items())),
        output=tuple(cr.OutputPattern(o["name"], o["pattern"]) for o in data.get("output", [])),
        source=data.get("source", "<log>"),
    )


def _kill_run_processes(probe_out: Path) -> int:
    """SIGKILL what a killed engine's run left behind: every process whose environment carries
    this run's probe file (its shell, the trainer, children that left the process group)."""
    import psutil

    prefix = str(Path(os.path.abspath(probe_out)))
    killed = 0
    for proc in psutil.process_iter():
        try:
            out = proc.environ().get("PORTSIDE_PROBE_OUT", "")
        except (psutil.Error, OSError):
            continue
        if out.startswith(prefix):
            with contextlib.suppress(psutil.Error, OSError):
                proc.send_signal(signal.SIGKILL)
                killed += 1
    return killed
