"""Agents built back from the spec a session recorded (``Agent.spec()``), for resume."""

from __future__ import annotations

import importlib
from typing import Any

from .base import Agent, AgentSpecError

# kind -> "module:Class"; imported on use so resuming a scripted session never loads the SDKs.
AGENT_KINDS: dict[str, str] = {
    "scripted": "portside.core.agent.scripted:ScriptedAgent",
    "claude": "portside.core.agent.claude:ClaudeAgent",
    "claude-code": "portside.core.claude_code.live:ClaudeCodeAgent",
    "claude-code-attached": "portside.core.claude_code.attached:AttachedClaudeCode",
    "codex": "portside.core.codex.live:CodexAgent",
}


def agent_from_spec(spec: dict[str, Any] | None) -> Agent | None:
    """The agent ``spec`` describes; ``AgentSpecError`` when it cannot be built."""
    if spec is None:
        return None
    kind = spec.get("kind")
    where = AGENT_KINDS.get(str(kind))
    if where is None:
        raise AgentSpecError(f"agent {spec.get('label') or kind!r} cannot be rebuilt from the log")
    module, _, name = where.partition(":")
    cls = getattr(importlib.import_module(module), name)
    try:
        return cls.from_spec(spec)  # type: ignore[no-any-return]
    except (KeyError, TypeError, ValueError) as exc:
        raise AgentSpecError(f"agent spec {spec!r}: {exc}") from None
