"""The claim checked where an agent stops, for agents that decide their own turns (Claude Code
attached or launched, Codex): the candidate runs under the checks (references first when there
are none); with error alarms open the stop is refused with their evidence, and a last message
that claims success raises ``agent-claim-contradicted``."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from portside.core.log import events as ev

from .base import AgentHost

#: How many stops are refused (errors open) before the claim goes to the reviewer anyway.
MAX_STOP_BLOCKS = 3

#: A last message that says the work is done and good.
CLAIM_RX = re.compile(
    r"\b(success(ful(ly)?)?|succeed(s|ed)?|all (tests|checks|runs?) pass(ed)?|passes|passed|"
    r"done|complete[ds]?|finished|ported|works|working|numerics? (are |is )?(unchanged|"
    r"preserved|identical|match(es)?))\b|✅",
    re.IGNORECASE,
)
NEGATION_RX = re.compile(r"\b(not|n't|fail(s|ed)?|unable|cannot|couldn't)\b", re.IGNORECASE)


def claims_success(message: str) -> bool:
    """Does this (last) message say the work succeeded? Conservative on negations."""
    if not message or not CLAIM_RX.search(message):
        return False
    first = message.strip().splitlines()[0] if message.strip() else ""
    return not (NEGATION_RX.search(first) and not CLAIM_RX.search(first))


def evidence_line(check: str, title: str, evidence: dict[str, Any]) -> str:
    detail = title if title.startswith(check) else f"{check}: {title}"
    extra = {k: v for k, v in evidence.items() if isinstance(v, int | float | str) and k != "key"}
    if extra:
        detail += " (" + ", ".join(f"{k}={v}" for k, v in list(extra.items())[:6]) + ")"
    return detail



async def refuse_stop(host: AgentHost, last: str, blocks: int, max_blocks: int,
                      publish: Callable[[ev.Event], None]) -> str:
    """Run and judge; the reason to refuse the stop (given to the agent), or "" to let the
    claim go to the reviewer (no error open, or refused ``max_blocks`` times already)."""
    if getattr(host, "has_references", True) is False:
        await host.run_reference()
    summary = await host.run_candidate()
    errors = host.open_errors() if hasattr(host, "open_errors") else []
    if not errors or blocks >= max_blocks:
        return ""
    evidence = "; ".join(evidence_line(c, t, e) for c, t, e in errors
                         if c != "agent-claim-contradicted")
    if claims_success(last) and not any(c == "agent-claim-contradicted" for c, _, _ in errors):
        from ..checks import agent_claim_contradicted

        a = agent_claim_contradicted(last, [], ", ".join(c for c, _, _ in errors),
                                     severity="critical", at="stop",
                                     open_alarms=[(c, t) for c, t, _ in errors])
        publish(a.raised(host.session_id))
    publish(ev.SessionState(session_id=host.session_id, state="agent-stop-blocked",
                            detail=f"stop {blocks + 1} of {max_blocks} blocked: {evidence}"))
    return (f"portside ran your version under the checks and error alarms are open: "
            f"{evidence}. Run summary: {summary}. Fix this (the numerics must match the "
            "reference) before you stop, or say plainly what you could not fix.")

