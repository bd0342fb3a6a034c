"""The engine as the agent sees it (``core/agent/base.py``: AgentHost).

Edits go through the review gate before the workspace is touched; runs go through the
verifier; the agent's claim is checked against the open alarms. The host uses the engine's
public surface only (bus, gate, ledger, verifier, workspace, ``run_candidate``, ``stop``...).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from portside.core.agent.base import AgentStopped, EditOutcome
from portside.core.checks import Alarm, agent_claim_contradicted
from portside.core.checks.evidence import EditMismatch
from portside.core.log import events as ev
from portside.core.log.criteria import PatternError, compile_pattern
from portside.core.safety.terminal_text import clean_line
from portside.core.scan.scan import scan, task_text
from portside.core.session.review import Decision
from portside.core.workspace.edits import Edit
from portside.core.workspace.names import WorkspaceError
from portside.core.workspace.risk import risk_marks

if TYPE_CHECKING:
    from portside.core.log.costs import PriceTable
    from portside.core.session.engine import SessionEngine

Interrupted = tuple[ev.EditProposed, ev.EditDecided | None, bool]


def task_brief(engine: SessionEngine) -> str:
    c, cr = engine.config, engine.criteria
    return "\n".join([
        f"Port the project in this workspace to target `{c.target}` "
        f"(torch_xla, or TorchTPU where the target is a TPU and it is installed).",
        f"Reference command (runs unchanged, on {c.reference_target}): {c.reference_command}",
        f"Candidate command (run in your workspace): {c.candidate}",
        f"Acceptance: goal metric {cr.goal.metric or '(none)'} within {cr.goal.tolerance} of "
        f"the reference ({cr.goal.direction}); drift checked on {', '.join(cr.drift.series)}; "
        f"no recompilation after step {cr.compile.warmup_steps}; "
        f"at most {cr.budget.max_attempts or 'unlimited'} candidate attempts.",
        # what will not move as it is, found before the agent reads a line (static: safe):
        # the scan the session logged at its start
        task_text(engine.scan_result or scan(Path(c.project))),
    ])


class EngineHost:
    def __init__(self, engine: SessionEngine) -> None:
        self.engine = engine
        self.session_id = engine.session_id
        assert engine.workspace is not None
        self.workspace = engine.workspace
        self.claimed = False
        self.task = task_brief(engine)
        self._tool_edits: dict[str, Edit] = {}  # approved, not yet applied by the agent
        resumed = engine.resumed
        self._interrupted_edit: Interrupted | None = resumed.interrupted_edit if resumed else None
        self._pending_claim: ev.AgentClaimed | None = resumed.pending_claim if resumed else None

    @property
    def prices(self) -> PriceTable:
        return self.engine.ledger.prices

    def publish(self, event: ev.Event) -> ev.Event:
        return self.engine.bus.publish(event)

    # --- edits -------------------------------------------------------------------------------

    def _interrupted(self, path: str) -> Interrupted | None:
        """The edit a kill cut off, if this call is making it again (taken once)."""
        found, self._interrupted_edit = self._interrupted_edit, None
        try:
            same = found is not None and self.workspace.relpath(path) == found[0].path
        except WorkspaceError:
            same = False
        return found if same else None

    def _already_applied(self, found: Interrupted) -> EditOutcome | None:
        proposed, decided, applied = found
        text = decided.after if decided is not None and decided.decision == "edited" else None
        try:
            if not applied or self.workspace.read_file(proposed.path) != (text or proposed.after):
                return None
        except WorkspaceError:
            return None
        msg = "applied as proposed" if text is None else "applied with the reviewer's changes"
        return EditOutcome("applied", proposed.edit_id, msg, applied_text=text)

    async def _review(self, edit: Edit, rationale: str, found: Interrupted | None = None
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
                                before=edit.before, after=edit.after, rationale=rationale,
                                risks=risk_marks(edit.path, edit.before, edit.after))
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

    # --- runs --------------------------------------------------------------------------------

    async def run_reference(self) -> str:
        e = self.engine
        report = await e.verifier.run_reference(e.config.reference_command,
                                                e.workdir / "reference",
                                                target=e.config.reference_target,
                                                env=e.config.reference_env)
        return (f"reference run #{report.attempt}: {report.outcome}, "
                f"{report.summary.get('steps')} steps, metrics {report.summary.get('metrics')}")

    async def run_candidate(self) -> str:
        e = self.engine
        await self.checkpoint()
        budget = e.budget_alarms(extra_attempt=True)
        if budget:
            await self._budget_stop(budget[0])
        report = await e.run_candidate(self.workspace.root)
        return e.verifier.summary_text(report)

    async def _budget_stop(self, alarm: Alarm) -> None:
        e = self.engine
        raised = e.raise_alarm(alarm)
        decision = await e.gate.review_budget(raised)
        if decision.action != "approve":
            reason = f"budget exhausted: {alarm.title}"
            e.stop_agent(reason)
            raise AgentStopped(reason)

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

    # --- the claim ---------------------------------------------------------------------------

    async def claim(self, summary: str) -> str:
        e = self.engine
        pending, self._pending_claim = self._pending_claim, None
        if pending is not None and pending.summary == summary:
            claim = pending  # made before the kill and still unanswered: answered now, once
        else:
            claim = e.bus.publish(ev.AgentClaimed(  # type: ignore[assignment]
                session_id=e.session_id, summary=summary))
        raised = any(a.check == "agent-claim-contradicted" and a.seq > claim.seq
                     for a in e.ledger.alarms.values())
        errors = e.ledger.open_errors()
        errors_text = "" if e.verifier.candidates else "no candidate run was made"
        if (errors or errors_text) and not raised:
            # Critical: the failure the study found hardest to see (success claimed, accuracy lost).
            e.raise_alarm(agent_claim_contradicted(
                summary, [], errors_text or ", ".join(a.check for a in errors),
                severity="critical", open_alarms=[(a.check, a.title) for a in errors]))
        await e.gate.review_claim(claim)  # type: ignore[arg-type]
        # A reviewer's verdict is an intervention: the ledger holds it, the engine ends on it.
        self.claimed = True
        raise AgentStopped("claimed")

    def take_messages(self) -> list[str]:
        return self.engine.gate.take_messages()

    # --- agents that apply their own edits and run their own commands (Claude Code) -----------
    # The gate decides before the agent acts; nothing here writes the workspace or runs.

    async def review_tool_edit(self, path: str, after: str, rationale: str) -> EditOutcome:
        """Propose setting ``path`` to ``after`` (a real diff against the file as it is now) and
        wait for the decision. "approved" carries the reviewer's text in ``applied_text`` when
        they changed it; the agent applies it, then calls :meth:`tool_edit_done`."""
        try:
            edit = self.workspace.propose_write(path, after)
        except WorkspaceError as exc:
            return EditOutcome("failed", "", str(exc))
        e = self.engine
        proposed = e.bus.publish(ev.EditProposed(
            session_id=e.session_id, edit_id=edit.edit_id, path=edit.path, before=edit.before,
            after=edit.after, rationale=rationale))
        decision = await e.gate.review_edit(proposed)  # type: ignore[arg-type]
        if decision.action == "reject":
            return EditOutcome("rejected", edit.edit_id, decision.note)
        text = decision.after if decision.action == "edit" else None
        self._tool_edits[edit.edit_id] = dataclasses.replace(edit, after=text or edit.after)
        return EditOutcome("approved", edit.edit_id, decision.note, applied_text=text)

    def tool_edit_done(self, edit_id: str) -> str:
        """The agent says it applied an approved edit: ``edit.applied`` when the file holds
        exactly the approved text, else an alarm (and the reason, returned)."""
        edit = self._tool_edits.pop(edit_id, None)
        if edit is None:
            return f"edit {edit_id} was not approved"
        e = self.engine
        try:
            now = self.workspace.read_file(edit.path)
        except WorkspaceError as exc:
            now = f"<unreadable: {exc}>"
        if now == edit.after:
            e.bus.publish(ev.EditApplied(session_id=e.session_id, edit_id=edit_id, path=edit.path))
            return ""
        why = f"{edit.path} does not hold the approved text of edit {edit_id} after the agent wrote it"
        e.raise_alarm(Alarm("edit-mismatch", "error", why,
                            EditMismatch(edit_id=edit_id, path=edit.path)))
        return why

    async def propose_command(self, command: str, description: str, cwd: str) -> EditOutcome:
        """A shell command the agent wants to run, as a ``command.proposed`` (cwd relative to
        the workspace); "approved" with the reviewer's version in ``applied_text`` when they
        edited it. The agent runs it (through the sandbox)."""
        e = self.engine
        try:
            where = self.workspace.relpath(os.path.relpath(os.path.realpath(cwd),
                                                           self.workspace.root)) or "."
        except (WorkspaceError, ValueError):
            where = cwd
        proposed = e.bus.publish(ev.CommandProposed(
            session_id=e.session_id, command_id=ev.new_id("cmd-"), command=command, cwd=where,
            description=description))
        assert isinstance(proposed, ev.CommandProposed)
        decision = await e.gate.review_command(proposed)
        if decision.action == "reject":
            return EditOutcome("rejected", proposed.command_id, decision.note)
        text = decision.after.strip() if decision.action == "edit" and decision.after else None
        return EditOutcome("approved", proposed.command_id, decision.note, applied_text=text)

    def open_errors(self) -> list[tuple[str, str, dict[str, Any]]]:
        """(check, title, evidence) of each open error-or-worse alarm, as its evidence now
        stands (the ledger folds ``alarm.updated``)."""
        found = {a.alarm_id: a for a in self.engine.gate.open_errors()}
        return [(a.check, a.title, a.evidence) for a in found.values()]

    @property
    def has_references(self) -> bool:
        return bool(self.engine.verifier.references)

    @property
    def stopping(self) -> str:
        """Why the session is ending ("" while it runs)."""
        return self.engine.stop_reason

    async def checkpoint(self) -> None:
        e = self.engine
        await e.gate.wait_if_paused()
        if e.stop_reason:
            raise AgentStopped(e.stop_reason)
