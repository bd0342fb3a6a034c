"""Resume a killed session from its log: the log is the truth, the engine is rebuilt from it.

``engine_from_log`` rebuilds the config from ``session.started`` (``SessionConfig.from_log``)
and hands the engine what the kill left half-way (``core/session/halfway.py``);
``SessionEngine.run`` then restores it (``_restore``): runs interrupted by the kill are finished
as ``aborted`` (reason ``engine-killed``) and their leftover processes killed; finished runs are
restored into the verifier, except references that did not finish ``passed`` (an aborted one
is run again and never counts: the ledger's rule for a valid reference); an edit or a claim the
kill cut off is kept so the reviewer's answer is not lost.
"""

from __future__ import annotations

import re
from typing import Any

from portside.core.agent.base import AgentSpecError
from portside.core.agent.registry import agent_from_spec
from portside.core.log import events as ev
from portside.core.log.criteria import Criteria, CriteriaError, parse_criteria
from portside.core.session.config import INTERRUPTED, RESUME_VERSION, SessionConfig
from portside.core.session.engine import SessionEngine
from portside.core.session.halfway import half_way
from portside.core.session.review import Policy

# What core/safety/secrets.redact_command leaves of an inline secret: NAME=*** or a URL's user:***@.
_REDACTED = re.compile(r"=\*\*\*(?=[\s;&|)]|$)|:\*\*\*@")


class ResumeError(RuntimeError):
    """A session that cannot be resumed (ended, recorded without resume data, still running)."""


def final_end(events: list[ev.Event]) -> ev.SessionEnded | None:
    """The session.ended that closes the session for good; None while it is open, or when
    its last end was a signal's (``interrupted``: a reboot, a closed terminal), which resumes."""
    last = next((e for e in reversed(events) if isinstance(e, ev.SessionEnded)), None)
    return None if last is None or last.outcome == INTERRUPTED else last


def engine_from_log(events: list[ev.Event], sink: Any, *, policy: Policy | None = None,
                    mode: str | None = None) -> SessionEngine:
    """An engine that continues the session whose log is ``events`` (``run()`` resumes)."""
    if not events or not isinstance(events[0], ev.SessionStarted):
        raise ResumeError("the log does not start with session.started")
    started = events[0]
    sid = started.session_id
    if final_end(events) is not None:
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
        criteria = Criteria.from_dict(started.criteria)
    try:
        agent = agent_from_spec(r.get("agent"))
    except AgentSpecError as exc:
        raise ResumeError(str(exc)) from None
    for command in (started.reference_command, started.candidate_command):
        if _REDACTED.search(command or ""):
            # The log keeps `HF_TOKEN=***`, never the value: running that again would run
            # something else than the session did, silently.
            raise ResumeError(f"session {sid}'s command held an inline secret, which the log "
                              f"does not keep ({command!r}); start a new session instead")
    config = SessionConfig.from_log(started, r, criteria=criteria, agent=agent,
                                    policy=policy, mode=mode)
    return SessionEngine(config, sink, session_id=sid, resumed=half_way(list(events)))


