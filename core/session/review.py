"""The review gate: what awaits the reviewer, and every human action as a timed intervention.

The engine asks the gate (``review_edit``, ``review_claim``) and awaits the answer; the UI calls
the reviewer-side methods (``approve``, ``reject``, ``acknowledge`` ...). Each reviewer action is
recorded durably as an ``intervention`` event *before* the method returns, so the UI only
confirms what is already on disk. ``attention_started_at`` is when the item was first shown
(``shown``), or when it appeared if the UI never said; ``decided_at`` is the call's time.
"""

from __future__ import annotations

import asyncio
import os
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from portside.core.checks.alarms import UNOVERRIDABLE
from portside.core.log import events as ev
from portside.core.log.bus import EventBus
from portside.core.log.ledger import AlarmEntry, Ledger

Policy = Literal["ask", "runs-only", "auto"]
POLICIES: tuple[str, ...] = ("ask", "runs-only", "auto")
VERDICT_ITEM = "verdict"  # the pending item of a session without an agent whose runs all ended


class GateError(RuntimeError):
    """A reviewer action that does not apply (no such pending edit, alarm already acked...)."""


@dataclass
class Decision:
    action: Literal["approve", "reject", "edit", "pass", "fail"]
    note: str = ""
    after: str | None = None
    by: Literal["reviewer", "policy"] = "reviewer"


@dataclass
class Pending:
    item_id: str
    kind: Literal["edit", "claim", "budget", "verdict"]
    answers: int | None
    created_at: float
    shown_at: float | None = None
    future: asyncio.Future[Decision] | None = None
    path: str = ""


@dataclass
class GateHooks:
    """What the engine does when the reviewer steers; set by the engine."""

    abort: Callable[[str], bool] | None = None  # run_id -> aborted?
    rerun: Callable[[], None] | None = None
    message: Callable[[str], None] | None = None
    verdict: Callable[[str, str], None] | None = None
    localize: Callable[[str], str] | None = None  # alarm_id -> what started (ValueError: why not)


def default_reviewer() -> str:
    return os.environ.get("PORTSIDE_REVIEWER") or os.environ.get("USER") or "reviewer"


class ReviewGate:
    def __init__(
        self,
        bus: EventBus,
        session_id: str,
        reviewer: str | None = None,
        policy: Policy = "ask",
        ledger: Ledger | None = None,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"policy {policy!r}: must be one of {', '.join(POLICIES)}")
        self.bus = bus
        self.session_id = session_id
        self.reviewer = reviewer or default_reviewer()
        self.policy: Policy = policy
        self.pending: dict[str, Pending] = {}
        if ledger is None:  # a gate on its own (replay notes, tests) keeps its own ledger
            ledger = Ledger()
            bus.subscribe(ledger.apply)
        self.ledger = ledger
        self.messages: deque[str] = deque()
        self.hooks = GateHooks()
        self.paused = False
        self._resumed: asyncio.Event | None = None
        self.during_replay = False

    # --- what the gate knows, from the session's ledger --------------------------------------

    @property
    def alarms(self) -> dict[str, AlarmEntry]:
        return self.ledger.alarms

    def open_errors(self) -> list[AlarmEntry]:
        """Error-or-worse alarms not cleared (an override clears; acknowledging keeps open)."""
        return self.ledger.open_errors()

    def unacknowledged(self) -> list[AlarmEntry]:
        return [a for a in self.alarms.values() if not a.acknowledged and not a.cleared]

    # --- engine side -------------------------------------------------------------------------

    async def review_edit(self, proposed: ev.EditProposed) -> Decision:
        if self.policy != "ask":
            decision = Decision("approve", by="policy")
            self._publish_decided(proposed.edit_id, decision)
            return decision
        return await self._wait(proposed.edit_id, "edit", proposed.seq, path=proposed.path)

    async def review_command(self, proposed: ev.CommandProposed) -> Decision:
        """A shell command an agent wants to run (Claude Code's Bash): the same approve /
        reject-with-reason / edit answers and interventions as an edit ("edit" gives the
        command to run instead), recorded as ``edit.decided`` on its command_id. Policies other
        than ``ask`` approve; what the command may touch is the sandbox's business."""
        if self.policy != "ask":
            decision = Decision("approve", by="policy")
            self._publish_decided(proposed.command_id, decision)
            return decision
        return await self._wait(proposed.command_id, "edit", proposed.seq,
                                path=f"$ {proposed.cwd}")

    async def review_claim(self, claim: ev.AgentClaimed) -> Decision:
        """The agent says it is done: in ``ask`` the reviewer gives the verdict."""
        if self.policy != "ask":
            verdict = "fail" if self.open_errors() else "pass"
            return Decision(verdict, by="policy")  # type: ignore[arg-type]
        return await self._wait(f"claim-{claim.seq}", "claim", claim.seq)

    async def review_budget(self, alarm: ev.AlarmRaised) -> Decision:
        """A stopping criterion was hit: the reviewer decides (rerun = continue, else stop)."""
        if self.policy != "ask":
            return Decision("fail", note=alarm.title, by="policy")
        return await self._wait(f"budget-{alarm.seq}", "budget", alarm.seq)

    async def _wait(self, item_id: str, kind: str, answers: int, path: str = "") -> Decision:
        fut: asyncio.Future[Decision] = asyncio.get_running_loop().create_future()
        self.pending[item_id] = Pending(item_id, kind, answers, ev.now(), future=fut, path=path)  # type: ignore[arg-type]
        try:
            return await fut
        finally:
            self.pending.pop(item_id, None)

    async def wait_if_paused(self) -> None:
        while self.paused:
            if self._resumed is None:
                self._resumed = asyncio.Event()
            await self._resumed.wait()

    def take_messages(self) -> list[str]:
        out = list(self.messages)
        self.messages.clear()
        return out

    # --- reviewer side -----------------------------------------------------------------------

    def shown(self, item_id: str, at: float | None = None) -> None:
        """The UI put this item (edit, claim or alarm) in front of the reviewer."""
        at = at or ev.now()
        if item_id in self.pending and self.pending[item_id].shown_at is None:
            self.pending[item_id].shown_at = at
        if item_id in self.alarms and self.alarms[item_id].shown_at is None:
            self.alarms[item_id].shown_at = at

    def pending_edits(self) -> list[Pending]:
        return [p for p in self.pending.values() if p.kind == "edit"]

    def pending_claim(self) -> Pending | None:
        return next((p for p in self.pending.values()
                     if p.kind in ("claim", "budget", "verdict")), None)

    def verdict_waits(self, waits: bool = True) -> None:
        """A session without an agent has nothing left to run: from now the verdict is what the
        reviewer has in front of them, and its attention starts here, as an agent's claim's
        does (a verdict given at once counted 0 s however long the screen sat at `awaiting
        verdict`). ``False``: it waits no more (a rerun started)."""
        if not waits:
            self.pending.pop(VERDICT_ITEM, None)
        elif self.pending_claim() is None:
            self.pending[VERDICT_ITEM] = Pending(VERDICT_ITEM, "verdict", None, ev.now())

    def _edit_item(self, edit_id: str | None) -> Pending:
        edits = self.pending_edits()
        if edit_id is None:
            if not edits:
                raise GateError("no edit is waiting for a decision")
            return edits[0]
        item = self.pending.get(edit_id)
        if item is None or item.kind != "edit":
            raise GateError(f"edit {edit_id} is not waiting for a decision")
        return item

    def _record(
        self,
        action: ev.InterventionKind,
        started: float,
        *,
        steering: bool | None = None,
        answers: int | None = None,
        target_id: str = "",
        note: str = "",
        verdict: str = "",
    ) -> ev.Intervention:
        now = ev.now()
        event = ev.Intervention(
            session_id=self.session_id,
            intervention_id=ev.new_id("i-"),
            action=action,
            steering=action in ev.STEERING_ACTIONS if steering is None else steering,
            attention_started_at=min(started, now),
            decided_at=now,
            reviewer=self.reviewer,
            answers=answers,
            target_id=target_id,
            note=note,
            during_replay=self.during_replay,
            verdict=verdict,  # type: ignore[arg-type]
        )
        self.bus.publish_durable(event)
        return event

    def _publish_decided(self, edit_id: str, d: Decision) -> None:
        decision = {"approve": "approved", "reject": "rejected", "edit": "edited"}[d.action]
        self.bus.publish(
            ev.EditDecided(
                session_id=self.session_id,
                edit_id=edit_id,
                decision=decision,  # type: ignore[arg-type]
                by=d.by,
                reason=d.note,
                after=d.after,
            )
        )

    def _resolve_edit(self, item: Pending, action: ev.InterventionKind, d: Decision) -> ev.Intervention:
        started = item.shown_at or item.created_at
        rec = self._record(action, started, answers=item.answers, target_id=item.item_id, note=d.note)
        self._publish_decided(item.item_id, d)
        if item.future is not None and not item.future.done():
            item.future.set_result(d)
        return rec

    def approve(self, edit_id: str | None = None, note: str = "") -> ev.Intervention:
        item = self._edit_item(edit_id)
        return self._resolve_edit(item, "approve", Decision("approve", note=note))

    def reject(self, edit_id: str | None, reason: str) -> ev.Intervention:
        if not reason.strip():
            raise GateError("a rejection needs a reason: the agent is told it")
        item = self._edit_item(edit_id)
        return self._resolve_edit(item, "reject", Decision("reject", note=reason))

    def edit(self, edit_id: str | None, after: str, note: str = "") -> ev.Intervention:
        item = self._edit_item(edit_id)
        return self._resolve_edit(item, "edit", Decision("edit", note=note, after=after))

    def message(self, text: str, started: float | None = None) -> ev.Intervention:
        if not text.strip():
            raise GateError("an empty message is not sent")
        rec = self._record("message", started or ev.now(), note=text)
        self.messages.append(text)
        if self.hooks.message:
            self.hooks.message(text)
        return rec

    def pause(self, started: float | None = None) -> ev.Intervention:
        self.paused = True
        rec = self._record("pause", started or ev.now())
        self.bus.publish(ev.SessionState(session_id=self.session_id, state="paused",
                                         detail=f"paused by {self.reviewer}"))
        return rec

    def resume(self, started: float | None = None) -> ev.Intervention:
        self.paused = False
        rec = self._record("resume", started or ev.now())
        self.bus.publish(ev.SessionState(session_id=self.session_id, state="running",
                                         detail=f"resumed by {self.reviewer}"))
        if self._resumed is not None:
            self._resumed.set()
            self._resumed = None
        return rec

    def toggle_pause(self, started: float | None = None) -> ev.Intervention:
        return self.resume(started) if self.paused else self.pause(started)

    def _alarm(self, alarm_id: str | None, *, for_ack: bool) -> AlarmEntry:
        if alarm_id is None:
            waiting = self.unacknowledged() if for_ack else self.open_errors()
            if not waiting:
                raise GateError("no alarm is waiting" if for_ack else "no open error alarm")
            return sorted(waiting, key=lambda a: (-ev.SEVERITY_RANK[a.severity], a.seq))[0]
        if alarm_id not in self.alarms:
            raise GateError(f"no alarm {alarm_id}")
        return self.alarms[alarm_id]

    def acknowledge(self, alarm_id: str | None = None, note: str = "") -> ev.Intervention:
        alarm = self._alarm(alarm_id, for_ack=True)
        if alarm.acknowledged:
            raise GateError(f"alarm {alarm.alarm_id} is already acknowledged")
        rec = self._record("acknowledge-alarm", alarm.shown_at or alarm.raised_at,
                           answers=alarm.seq, target_id=alarm.alarm_id, note=note)
        self.bus.publish(ev.AlarmAcknowledged(session_id=self.session_id, alarm_id=alarm.alarm_id,
                                              by=self.reviewer, note=note))
        return rec

    def override(self, alarm_id: str | None, reason: str) -> ev.Intervention:
        """The reviewer judges an alarm false: it no longer blocks a pass."""
        if not reason.strip():
            raise GateError("overriding an alarm needs a reason")
        alarm = self._alarm(alarm_id, for_ack=False)
        if alarm.check in UNOVERRIDABLE:
            raise GateError(f"{alarm.check} cannot be overridden: the run's evidence is not its "
                            "own, so nothing it shows can be weighed (a rerun can pass)")
        rec = self._record("override-alarm", alarm.shown_at or alarm.raised_at,
                           answers=alarm.seq, target_id=alarm.alarm_id, note=reason)
        self.bus.publish(ev.AlarmCleared(session_id=self.session_id, alarm_id=alarm.alarm_id,
                                         reason=f"overridden by {self.reviewer}: {reason}"))
        return rec

    def rerun(self, note: str = "", started: float | None = None) -> ev.Intervention:
        rec = self._record("rerun", started or ev.now(), note=note)
        if self.hooks.rerun:
            self.hooks.rerun()
        return rec

    def abort(self, run_id: str, note: str = "", started: float | None = None) -> ev.Intervention:
        rec = self._record("abort", started or ev.now(), target_id=run_id, note=note)
        if self.hooks.abort:
            self.hooks.abort(run_id)
        return rec

    def verdict(self, verdict: Literal["pass", "fail"], note: str = "") -> ev.Intervention:
        """The reviewer decides; steering when it goes against the checks."""
        claim = self.pending_claim()
        against_checks = (verdict == "pass") == bool(self.open_errors())
        started = (claim.shown_at or claim.created_at) if claim else ev.now()
        rec = self._record("verdict", started, steering=against_checks,
                           answers=claim.answers if claim else None,
                           target_id=claim.item_id if claim and claim.kind != "verdict" else "",
                           note=note, verdict=verdict)
        if claim is not None and claim.future is not None and not claim.future.done():
            claim.future.set_result(Decision(verdict, note=note))
        if self.hooks.verdict:
            self.hooks.verdict(verdict, note)
        return rec

    def localize(self, alarm_id: str | None) -> str:
        """Ask the engine where the candidate first diverged, for this alarm (not an
        intervention: a question, it changes nothing)."""
        if self.hooks.localize is None:
            raise GateError("localizing needs the live session (its engine runs the commands)")
        if alarm_id is None:
            ranked = sorted(self.ledger.open_alarms(), key=lambda a: a.seq)
            alarm_id = ranked[0].alarm_id if ranked else None
        if alarm_id is None:
            raise GateError("no alarm to localize")
        try:
            return self.hooks.localize(alarm_id)
        except ValueError as exc:
            raise GateError(str(exc)) from None

    def note(self, text: str, started: float | None = None) -> ev.Intervention:
        kind: ev.InterventionKind = "review-note" if self.during_replay else "note"
        return self._record(kind, started or ev.now(), steering=False, note=text)
