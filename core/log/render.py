"""Events as one line of plain text: `portside show`, headless logs and headless replay."""

from __future__ import annotations

import json
import time
from typing import Any

from portside.core.log import events as ev
from portside.core.safety.terminal_text import clean_line


def reused_text(reused_from: dict[str, Any]) -> str:
    """"reused from <session> <when>": a reference copied from a stored run (the console,
    the live screen and replay say it the same way)."""
    when = reused_from.get("finished_at")
    at = (time.strftime(" %Y-%m-%d %H:%M UTC", time.gmtime(when))
          if isinstance(when, int | float) else "")
    host = reused_from.get("host")
    return (f"reused from {clean_line(str(reused_from.get('session', '?')), 40)}{at}"
            + (f" on {clean_line(str(host), 60)}" if host else ""))


def _clip(text: str, n: int = 100) -> str:
    text = clean_line(text.replace("\n", " ⏎ "))
    return text if len(text) <= n else text[: n - 1] + "…"


def event_text(event: ev.Event) -> str:
    # Every field may come from a run, an agent or an imported recording: clean the whole line.
    return clean_line(_event_text(event))


def _event_text(event: ev.Event) -> str:
    match event:
        case ev.SessionStarted():
            return f"session started: {event.project} → {event.target} (agent {event.agent})"
        case ev.SessionEnded():
            return f"session ended: verdict {event.verdict} {event.outcome} {_clip(event.reason)}"
        case ev.SessionState():
            return f"state: {event.state} {_clip(event.detail)}"
        case ev.AgentText():
            return f"agent: {_clip(event.text)}"
        case ev.AgentToolCall():
            return f"agent ▸ {event.name} {_clip(json.dumps(event.input, sort_keys=True), 80)}"
        case ev.AgentToolResult():
            mark = "✖" if event.is_error else "◂"
            return f"agent {mark} {_clip(event.content, 80)}"
        case ev.AgentUsage():
            return (
                f"usage: {event.model} in {event.input_tokens} out {event.output_tokens} "
                f"${event.cost_usd:.4f}"
            )
        case ev.AgentClaimed():
            return f"agent claims success: {_clip(event.summary)}"
        case ev.CommandProposed():
            return f"command {event.command_id} proposed in {event.cwd}: $ {_clip(event.command, 80)}"
        case ev.EditProposed() if (cmd := ev.as_command(event)) is not None:
            return f"command {cmd.command_id} proposed in {cmd.cwd}: $ {_clip(cmd.command, 80)}"
        case ev.EditProposed():
            return f"edit {event.edit_id} proposed: {event.path}"
        case ev.EditDecided():
            reason = f": {_clip(event.reason)}" if event.reason else ""
            return f"edit {event.edit_id} {event.decision} by {event.by}{reason}"
        case ev.EditApplied():
            return f"edit {event.edit_id} applied to {event.path}"
        case ev.EditReverted():
            return f"edit {event.edit_id} reverted {event.path}"
        case ev.RunStarted():
            shared = (f" ({event.threads} thread{'s' if event.threads > 1 else ''}: the machine "
                      f"shared)") if event.threads else ""
            reused = f" ({reused_text(event.reused_from)})" if event.reused_from else ""
            return (
                f"run {event.run_id} started: {event.role} #{event.attempt} on {event.target}"
                f"{shared}{reused}: {_clip(event.command, 60)}"
            )
        case ev.RunOutput():
            last = _clip(event.lines[-1], 80) if event.lines else ""
            return f"run {event.run_id} output +{len(event.lines)} lines: {last}"
        case ev.RunRecord():
            return f"run {event.run_id} +{len(event.records)} records"
        case ev.RunFinished():
            return (
                f"run {event.run_id} finished: {event.outcome} exit {event.exit_code} "
                f"{event.wall_s:.1f}s {event.steps} steps {_clip(event.error_message, 60)}"
            )
        case ev.AlarmRaised():
            return f"ALARM {event.severity} {event.check}: {_clip(event.title)}"
        case ev.AlarmUpdated():
            at = f" at step {event.step}" if event.step is not None else ""
            return f"alarm {event.alarm_id} evidence updated{at}: {_clip(event.title)}"
        case ev.AlarmAcknowledged():
            return f"alarm {event.alarm_id} acknowledged by {event.by}"
        case ev.AlarmCleared():
            return f"alarm {event.alarm_id} cleared {_clip(event.reason)}"
        case ev.AlarmLocalized():
            return f"alarm {event.alarm_id} localized: {_clip(event.summary or event.error)}"
        case ev.ProjectScanned():
            counts = ", ".join(f"{n} {k}" for k, n in event.counts.items()) or "nothing to port"
            return f"scan: {event.files} file(s) in {event.seconds:.2f} s: {counts}"
        case ev.Intervention():
            steer = " (steering)" if event.steering else ""
            took = event.decided_at - event.attention_started_at
            note = f": {_clip(event.note)}" if event.note else ""
            return f"intervention {event.action}{steer} by {event.reviewer} after {took:.1f}s{note}"
    return str(event.__struct_config__.tag)


def event_line(event: ev.Event, start: float | None = None) -> str:
    offset = event.ts - start if start is not None else 0.0
    return f"{event.seq:>6} +{offset:8.2f}s  {event_text(event)}"
