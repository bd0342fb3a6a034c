"""What an agent is, and what the session engine offers it.

An agent drives the migration by calling the host: it reads and greps the workspace, proposes
edits (and learns the reviewer's decision), runs the reference or the candidate (and gets the
verification summary back), and finally claims success. The host publishes the events; the agent
publishes only its own words (``agent.text``, ``agent.tool_call``, ``agent.tool_result``,
``agent.usage``) through ``host.publish``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from .. import events as ev

if TYPE_CHECKING:
    from ..workspace import Workspace


@dataclass
class EditOutcome:
    """The reviewer's answer to a proposed edit, as the agent sees it."""

    status: Literal["applied", "rejected", "failed"]
    edit_id: str
    message: str  # the reviewer's reason on rejection; the error when the edit did not apply
    applied_text: str | None = None  # the file's text after a reviewer-edited apply


class AgentHost(Protocol):
    session_id: str
    workspace: Workspace

    def publish(self, event: ev.Event) -> ev.Event: ...

    async def propose_replace(self, path: str, old: str, new: str, rationale: str) -> EditOutcome:
        """Propose an exact-string replacement; returns once the reviewer (or policy) decided."""
        ...

    async def propose_write(self, path: str, content: str, rationale: str) -> EditOutcome: ...

    async def run_reference(self) -> str:
        """Run the reference again; returns a text summary."""
        ...

    async def run_candidate(self) -> str:
        """Run the candidate command in the workspace; returns outcome and alarms as text."""
        ...

    def read_run_log(self, run: str = "last", tail: int = 50, grep: str | None = None) -> str: ...

    async def claim(self, summary: str) -> str:
        """The agent says it is done; returns portside's answer (e.g. contradicting alarms)."""
        ...

    def take_messages(self) -> list[str]:
        """Reviewer messages not yet delivered to the agent."""
        ...

    async def checkpoint(self) -> None:
        """Called between turns: waits while the session is paused, raises when it stops."""
        ...


class Agent(Protocol):
    label: str  # shown everywhere the agent shows: "claude:claude-sonnet-4-5", "scripted:agent.jsonl"

    async def run(self, host: AgentHost) -> None: ...


class AgentStopped(Exception):
    """Raised by ``host.checkpoint`` when the session ends (abort, budget, verdict)."""
