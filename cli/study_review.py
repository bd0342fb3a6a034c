"""`portside study review SESSION` (and enter on the sessions screen): a reviewer opens a study's
running session from another terminal and decides its cards while the rest of the study goes on.

The screen is the live screen: its events come from the database as the `study run` commits
them, its gate is a RemoteGate (core/study/remote_gate.py) whose decisions go through that
`study run` to the session's worker, and come back as interventions through the one writer.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from portside.core.log import events as ev

FOLLOW_S = 0.2  # how often the database is asked for the session's new events


def work_root(store: Any) -> Path:
    """Where `study run` keeps a study's checkouts, workdirs and review relay: beside its db."""
    return Path(store.path).resolve().parent / "work"


def review_relay(store: Any, session_id: str) -> Path | None:
    """The relay file of the `study run` that runs this session now, if it is an open study
    session of a study that takes a reviewer's decisions; else None."""
    from portside.core.session.resume import final_end
    from portside.core.study.review_relay import relay_file

    first = next(store.event_bodies(session_id, 1, 1), None)
    if first is None:
        return None
    study = (json.loads(first).get("meta") or {}).get("study")
    if not isinstance(study, dict) or not study.get("name"):
        return None
    path = relay_file(work_root(store), str(study["name"]))
    ends = list(store.events(session_id, kinds=["session.ended", "session.state"]))
    if not path.exists() or final_end(ends) is not None:
        return None
    return path


class Follower:
    """The reviewer's side of a running study session: a bus fed the session's committed
    events (``catch_up``), and the RemoteGate that folds them and carries decisions."""

    def __init__(self, store: Any, session_id: str, relay: Path) -> None:
        from portside.core.log.bus import EventBus
        from portside.core.study.remote_gate import RemoteGate
        from portside.core.study.review_relay import send_decision

        self.store, self.session_id = store, session_id
        self.bus = EventBus(None)
        self.gate = RemoteGate(self.bus, session_id, lambda req: send_decision(relay, req),
                               self._recorded)
        self.history = list(store.events(session_id))
        for e in self.history:  # the gate and its ledger learn the past; the screen draws it
            self.bus.deliver_only(e)
        self.last = self.history[-1].seq if self.history else 0
        # Its ends: an interrupted one (resumed by the next `study run`) is not the end.
        self._ends = [e for e in self.history if isinstance(e, ev.SessionEnded)]

    def _recorded(self, action: str, target: str, since: int) -> ev.Intervention | None:
        for e in self.store.events(self.session_id, since + 1, kinds=["intervention"]):
            if isinstance(e, ev.Intervention) and (e.action, e.target_id) == (action, target):
                return e
        return None

    def catch_up(self) -> list[ev.Event]:
        """The events committed since the last call, delivered on the bus."""
        new = list(self.store.events(self.session_id, self.last + 1))
        for e in new:
            self.bus.deliver_only(e)
        if new:
            self.last = new[-1].seq
            self._ends += [e for e in new if isinstance(e, ev.SessionEnded)]
        return new

    @property
    def ended(self) -> bool:
        from portside.core.session.resume import final_end

        return final_end(self._ends) is not None

    def info(self) -> dict[str, Any]:
        info: dict[str, Any] = {"session_id": self.session_id, "policy": "ask"}
        start = next((e for e in self.history if isinstance(e, ev.SessionStarted)), None)
        if start is not None:
            info.update(project=start.project, target=start.target, agent=start.agent,
                        title=start.title, mode="study review", criteria=start.criteria,
                        banner=start.meta.get("banner", ""))
        return info

    async def follow(self) -> None:
        """Until the session's end (the screen stays, to read)."""
        while not self.ended:
            self.catch_up()
            await asyncio.sleep(FOLLOW_S)

    def app(self) -> Any:
        """The live screen over the session; ``q`` leaves it, the session goes on."""
        from portside.tui.app import make_app

        return make_app(bus=self.bus, gate=self.gate, info=self.info(), engine_run=self.follow,
                        history=self.history)


def waits_for_reviewer(store: Any, session_id: str) -> bool:
    """A running study session with a card nobody has decided (the sessions screen marks it)."""
    from portside.core.session.awaiting import awaiting

    return review_relay(store, session_id) is not None and bool(
        awaiting(store.events(session_id)))


def review_session(store: Any, session_id: str, relay: Path) -> None:
    Follower(store, session_id, relay).app().run()
