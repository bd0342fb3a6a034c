"""What a killed session's log says it left half-way: an edit, a claim, runs cut off.

Read once when a session resumes (``core/session/resume.py``); the engine restores its runs
from it and the agent's host takes the cut-off edit or claim, so the reviewer's answer is not
lost.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from portside.core.log import events as ev


@dataclass
class Resumed:
    """What the log says the killed engine left half-way."""

    log: list[ev.Event]
    # The edit a kill cut off: (proposed, decided or None, applied); taken once by the host.
    interrupted_edit: tuple[ev.EditProposed, ev.EditDecided | None, bool] | None = None
    pending_claim: ev.AgentClaimed | None = None  # a claim the kill left unanswered
    agent_done: bool = False  # the agent's claim was answered; only the end is missing
    interrupted_runs: list[str] = field(default_factory=list)


def half_way(log: list[ev.Event]) -> Resumed:
    """An edit or a claim the kill left half-way, so the reviewer's answer is not lost."""
    resumed = Resumed(log)
    results = {e.call_id for e in log if isinstance(e, ev.AgentToolResult)}
    last_call = next((e for e in reversed(log) if isinstance(e, ev.AgentToolCall)), None)
    if last_call is None or last_call.call_id in results:
        if any(isinstance(e, ev.AgentClaimed) for e in log) and last_call is not None \
                and last_call.name == "finish":
            resumed.agent_done = True
        return resumed
    after = [e for e in log if e.seq > last_call.seq]
    if last_call.name == "finish":
        resumed.pending_claim = next((e for e in after if isinstance(e, ev.AgentClaimed)), None)
    elif last_call.name in ("propose_edit", "write_file"):
        proposed = next((e for e in after if isinstance(e, ev.EditProposed)), None)
        if proposed is not None:
            decided = next((e for e in after if isinstance(e, ev.EditDecided)
                            and e.edit_id == proposed.edit_id), None)
            applied = any(isinstance(e, ev.EditApplied) and e.edit_id == proposed.edit_id
                          for e in after)
            resumed.interrupted_edit = (proposed, decided, applied)
    return resumed
