"""What an agent is, and what the session engine offers it.

An agent drives the migration by calling the host: it reads and greps the workspace, proposes
edits (and learns the reviewer's decision), runs the reference or the candidate (and gets the
verification summary back), and finally claims success. The host publishes the events; the agent
publishes only its own words (``agent.text``, ``agent.tool_call``, ``agent.tool_result``,
``agent.usage``) through ``host.publish``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from portside.core.log import events as ev

if TYPE_CHECKING:
    from portside.core.log.costs import PriceTable
    from portside.core.workspace.workspace import Workspace


@dataclass
class EditOutcome:
    """The reviewer's answer to a proposed edit, as the agent sees it."""

    #: "approved": reviewed, to be carried out by the agent itself (Claude Code applies its own
    #: edits and runs its own commands once the gate said yes).
    status: Literal["applied", "approved", "rejected", "failed"]
    edit_id: str
    message: str  # the reviewer's reason on rejection; the error when the edit did not apply
    applied_text: str | None = None  # the file's text after a reviewer-edited apply


class AgentHost(Protocol):
    session_id: str
    workspace: Workspace
    #: The session's brief for the agent: target (torch_xla | TorchTPU, hardware), reference and
    #: candidate commands, acceptance criteria in a few lines. Agents read it with
    #: ``getattr(host, "task", "")``, so a host without it still works.
    task: str
    #: The session's price table (shipped prices plus the criteria's overrides): agents price
    #: their own ``agent.usage`` with it, so the ledger's token $ honours the overrides.
    @property
    def prices(self) -> PriceTable: ...


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

    async def run(self, host: AgentHost) -> None:
        """Drive the migration until the agent claims success (``host.claim`` answered) or has
        nothing more to do. The agent keeps its state: calling ``run`` again continues where it
        left off (after a claim the engine did not accept, after an ``AgentAPIError``), with
        the claim's answer and any reviewer messages delivered first."""
        ...

    def spec(self) -> dict[str, Any]:
        """How to build this agent again after a kill: ``{"kind": ..., ...}``, JSON, no secrets
        (recorded in ``session.started``; ``core/agent/registry.py`` builds it back)."""
        ...

    def restore(self, events: list[ev.Event], host: AgentHost) -> None:
        """Continue a killed session: bring the agent's state to the end of ``events``."""
        ...


class AgentSpecError(Exception):
    """A recorded agent spec that cannot be built again (the recording moved or changed)."""


class AgentStopped(Exception):
    """Raised by ``host.checkpoint`` when the session ends (abort, budget, verdict)."""


class AgentAPIError(Exception):
    """The agent's model API failed for good (retries spent, or an error retrying cannot fix:
    bad key, bad request). The agent has already published ``session.state`` "agent-error"
    with the detail; the engine pauses and may call ``run`` again to continue, nothing lost."""

    def __init__(self, message: str, *, status_code: int | None = None, retryable: bool = False):
        super().__init__(message)
        self.status_code = status_code
        self.retryable = retryable  # True: a later retry may succeed (overload, rate limit)
