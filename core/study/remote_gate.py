"""The reviewer's gate on a study session whose engine runs in a worker elsewhere.

The live screen talks to a ``ReviewGate``; this one is fed the session's events as the
database commits them (the bus it is given), folds what waits for a reviewer from them
(core/session/awaiting.py), and carries a decision to the engine through the `study run`
that owns the session (core/study/review_relay.py). It returns once the engine's own gate
has recorded the intervention and it is in the log, as a local gate returns once it is on disk.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from portside.core.log import events as ev
from portside.core.log.bus import EventBus
from portside.core.session.awaiting import AwaitingFold
from portside.core.session.review import GateError, Pending, ReviewGate

from .review_relay import RelayError

DECIDED_WAIT_S = 15.0  # for the intervention to come back through the head's writer
NOT_HERE = ("from a study session's review: approve (a), reject (r), edit (e), message (m), "
            "pause (space) and the verdict (v); the rest is the engine's own")

Send = Callable[[dict[str, Any]], None]
# (action, target id, since seq) -> the intervention once it is committed, else None
Recorded = Callable[[str, str, int], ev.Intervention | None]


class RemoteGate(ReviewGate):
    def __init__(self, bus: EventBus, session_id: str, send: Send, recorded: Recorded,
                 reviewer: str | None = None) -> None:
        super().__init__(bus, session_id, reviewer, "ask")
        self._send = send
        self._recorded = recorded
        self._fold = AwaitingFold()
        self._last_seq = 0
        bus.subscribe(self._learn)

    def _learn(self, e: ev.Event) -> None:
        self._last_seq = max(self._last_seq, e.seq)
        if isinstance(e, ev.SessionState) and e.state in ("paused", "running"):
            self.paused = e.state == "paused"  # the engine's gate says so when it pauses
        self._fold.apply(e)
        items = self._fold.items
        for item_id in [k for k in self.pending if k not in items]:
            del self.pending[item_id]
        for a in items.values():
            if a.item_id not in self.pending:
                self.pending[a.item_id] = Pending(a.item_id, a.kind, a.answers, a.created_at,
                                                  path=a.path)

    def _decide(self, item: Pending | None, action: str, note: str, verdict: str = "",
                started: float | None = None, **more: str) -> ev.Intervention:
        target = item.item_id if item is not None else ""
        since = self._last_seq
        shown = (item.shown_at or item.created_at) if item else (started or time.time())
        try:
            self._send({"session": self.session_id, "action": action, "target": target,
                        "note": note, "verdict": verdict, "reviewer": self.reviewer,
                        "shown_at": shown, **more})
        except RelayError as exc:
            raise GateError(str(exc)) from None
        deadline = time.monotonic() + DECIDED_WAIT_S
        while time.monotonic() < deadline:
            rec = self._recorded(action, target, since)
            if rec is not None:
                return rec
            time.sleep(0.05)
        raise GateError(f"the session's engine did not record the decision within "
                        f"{DECIDED_WAIT_S:.0f} s (its worker's log says why)")

    def approve(self, edit_id: str | None = None, note: str = "") -> ev.Intervention:
        return self._decide(self._edit_item(edit_id), "approve", note)

    def reject(self, edit_id: str | None, reason: str) -> ev.Intervention:
        if not reason.strip():
            raise GateError("a rejection needs a reason: the agent is told it")
        return self._decide(self._edit_item(edit_id), "reject", reason)

    def verdict(self, verdict: Any, note: str = "") -> ev.Intervention:
        claim = self.pending_claim()
        if claim is None:
            raise GateError("no claim is waiting for a verdict")
        return self._decide(claim, "verdict", note, verdict=str(verdict))

    def edit(self, edit_id: str | None, after: str, note: str = "") -> ev.Intervention:
        return self._decide(self._edit_item(edit_id), "edit", note, after=after)

    def message(self, text: str, started: float | None = None) -> ev.Intervention:
        if not text.strip():
            raise GateError("an empty message is not sent")
        return self._decide(None, "message", text, started=started)

    def pause(self, started: float | None = None) -> ev.Intervention:
        return self._decide(None, "pause", "", started=started)

    def resume(self, started: float | None = None) -> ev.Intervention:
        return self._decide(None, "resume", "", started=started)

    def _not_here(self, *args: Any, **kwargs: Any) -> ev.Intervention:
        raise GateError(NOT_HERE)

    acknowledge = override = _not_here
    rerun = abort = note = _not_here

    def localize(self, alarm_id: str | None) -> str:
        raise GateError(NOT_HERE)
