"""The session engine: wires agent, review gate, runner and checks, and emits every event.

One engine serves `portside verify` (references, one candidate, verdict from the checks),
`portside run` without an agent (the same, live, with the reviewer able to re-run, abort and
decide), and agent sessions (the agent proposes edits through the gate into its workspace and
asks for candidate runs; the stopping criteria apply; its claim is checked against the alarms).
"""

from __future__ import annotations

import asyncio
import getpass
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import events as ev
from .agent.base import Agent, AgentAPIError, AgentStopped, EditOutcome
from .bus import EventBus, Sink
from .checks import agent_claim_contradicted, check_budget
from .costs import load_prices, session_cost
from .criteria import Criteria
from .review import Policy, ReviewGate
from .textsafe import clean_line
from .verify import RunReport, Verifier
from .workspace import Edit, Workspace, WorkspaceError


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
        self.workdir = config.workdir or Path(os.environ.get("TMPDIR", "/tmp")) / (
            f"portside-{self.session_id}"
        )
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
                reference_command=c.reference_command,
                candidate_command=c.candidate_command or c.reference_command,
                reviewer=self.gate.reviewer or getpass.getuser(),
                mode=c.mode,
                meta={"policy": c.policy, "reference_runs": c.reference_runs,
                      "criteria_file": c.criteria_path, **c.meta},
            )
        )

    async def run(self) -> SessionResult:
        self._rerun = asyncio.Queue()
        self._decided = asyncio.Event()
        self._started()
        try:
            ref_cwd, cand_cwd = self._prepare_dirs()
            for _ in range(self.config.reference_runs):
                if self._stop_reason:
                    break
                await self.verifier.run_reference(
                    self.config.reference_command, ref_cwd,
                    target=self.config.reference_target, env=self.config.reference_env,
                )
            if self.config.agent is not None and not self._stop_reason:
                await self._agent_session()
            elif not self._stop_reason:
                await self._verification(cand_cwd)
        except asyncio.CancelledError:
            self._stop_reason = self._stop_reason or "cancelled"
            self._end()
            raise
        return self._end()

    def _prepare_dirs(self) -> tuple[Path, Path]:
        project = Path(self.config.project)
        if not self.config.isolate:
            return project, project
        self.workdir.mkdir(parents=True, exist_ok=True)
        pristine = self.workdir / "reference"
        if not pristine.exists():
            Workspace.pristine_copy(project, pristine)
        self.workspace = Workspace.create(project, self.workdir / "workspaces", name=self.session_id)
        return pristine, self.workspace.root

    async def _candidate(self, cwd: Path) -> RunReport:
        return await self.verifier.run_candidate(
            self.config.candidate_command or self.config.reference_command,
            cwd,
            env=self.config.candidate_env,
        )

    async def _verification(self, cwd: Path) -> None:
        report = await self._candidate(cwd)
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
                report = await self._candidate(cwd)
        del report

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
            return session_cost(attempts, tokens, self._human_minutes(), table)
        except Exception as exc:  # cost accounting never breaks a verdict
            return {"error": f"cost accounting failed: {exc}"}

    def _human_minutes(self) -> float:
        return self._human_s / 60.0

    # --- agent sessions ----------------------------------------------------------------------

    async def _agent_session(self) -> None:
        assert self.config.agent is not None
        host = EngineHost(self)
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

    async def _review(self, edit: Edit, rationale: str) -> EditOutcome:
        e = self.engine
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
        try:
            edit = self.workspace.propose_replace(path, old, new)
        except WorkspaceError as exc:
            return EditOutcome("failed", "", str(exc))
        return await self._review(edit, rationale)

    async def propose_write(self, path: str, content: str, rationale: str) -> EditOutcome:
        try:
            edit = self.workspace.propose_write(path, content)
        except WorkspaceError as exc:
            return EditOutcome("failed", "", str(exc))
        return await self._review(edit, rationale)

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
                rx = re.compile(grep)
            except re.error as exc:
                return f"bad regex {grep!r}: {exc}"
            lines = [x for x in lines if rx.search(x)]
        return "\n".join(lines[-max(1, min(tail, 500)):]) or "(no matching lines)"

    async def claim(self, summary: str) -> str:
        e = self.engine
        claim = e.bus.publish(ev.AgentClaimed(session_id=e.session_id, summary=summary))
        errors = e.gate.open_errors()
        if not e.verifier.candidates:
            errors_text = "no candidate run was made"
        else:
            errors_text = ""
        if errors or errors_text:
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

