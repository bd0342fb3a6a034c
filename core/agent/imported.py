"""What every imported session (a Claude Code transcript, a Codex rollout) goes through before the
store takes it: its secrets masked, its events numbered and checked; and the one error a reader
of such a file raises."""

from __future__ import annotations

import os
from typing import Any

from portside.core.log import events as ev


class TranscriptError(ValueError):
    """A transcript or log that cannot be imported; the message starts with ``file:line:``."""


def seal_imported(events: list[ev.Event], where: str) -> list[ev.Event]:
    """An imported session's events (session.started first) as the store takes them: secrets
    masked (:func:`redact_imported`; the files that held one are named in the metadata), seq
    numbered, payloads checked (TranscriptError at ``where``)."""
    started = events[0]
    assert isinstance(started, ev.SessionStarted)
    redacted = redact_imported(events)
    if redacted:
        started.meta["redacted_files"] = redacted
    for i, e in enumerate(events, start=1):
        e.seq = i
        try:
            ev.check_payload(e)
        except ev.EventError as exc:
            raise TranscriptError(f"{where}: {exc}") from None
    return events


def redact_imported(events: list[ev.Event]) -> list[str]:
    """Secrets never reach the store: the values of this environment's secrets (the API key
    Claude Code used is usually among them) and of secret assignments in the session's Bash
    commands are masked in every field. Returns the edited files whose text changed (their
    trees cannot be rebuilt from what is stored)."""
    from portside.core.safety.secrets import (
        Redactor,
        inline_values,
        map_text,
        mask_text,
        redact_command,
        scrubbed_values,
    )

    commands = [str(e.input.get("command") or "") for e in events
                if isinstance(e, ev.AgentToolCall) and e.name == "Bash"]
    known = Redactor([*scrubbed_values(os.environ), *(v for c in commands
                                                      for v in inline_values(c))])

    def scrub(value: Any) -> Any:  # and token-shaped strings, whoever's they are
        return map_text(value, lambda text: mask_text(known(text)))

    touched: list[str] = []
    for e in events:
        if isinstance(e, ev.AgentToolCall) and isinstance(e.input.get("command"), str):
            e.input["command"] = redact_command(e.input["command"])
        elif isinstance(e, ev.CommandProposed):
            e.command = redact_command(e.command)
        for name in e.__struct_fields__:
            if name in ("session_id", "risks"):
                continue
            old = getattr(e, name)
            new = scrub(old) if isinstance(old, str | list | dict) else old
            if new != old:
                setattr(e, name, new)
                if isinstance(e, ev.EditProposed) and name in ("before", "after"):
                    touched.append(e.path)
    return sorted(set(touched))


__all__ = ["TranscriptError", "redact_imported", "seal_imported"]
