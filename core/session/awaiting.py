"""What waits for a reviewer, folded from a session's log alone: an edit or a command proposed
and not decided yet, and (where the reviewer gives the verdict, ``--policy ask``) an agent's
claim with no verdict after it. The engine's own gate knows the same from its futures; this
fold is for whoever is not in the engine's process: a reviewer who opens a study's running
session from another terminal (core/study/remote_gate.py) and ``study status``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from portside.core.log import events as ev


@dataclass(frozen=True)
class Awaited:
    item_id: str  # the edit's or command's id; claim-<seq> for a claim (as the gate names it)
    kind: Literal["edit", "claim"]
    answers: int  # the seq of the event a decision answers
    created_at: float
    path: str = ""


class AwaitingFold:
    def __init__(self) -> None:
        self.items: dict[str, Awaited] = {}
        self.asks = False  # the session's policy is "ask": a claim waits for a verdict

    def apply(self, e: ev.Event) -> None:
        if isinstance(e, ev.SessionStarted):
            self.asks = (e.meta or {}).get("policy") == "ask"
        elif isinstance(e, ev.EditProposed):
            self.items[e.edit_id] = Awaited(e.edit_id, "edit", e.seq, e.ts, e.path)
        elif isinstance(e, ev.CommandProposed):
            self.items[e.command_id] = Awaited(e.command_id, "edit", e.seq, e.ts, f"$ {e.cwd}")
        elif isinstance(e, ev.EditDecided):
            self.items.pop(e.edit_id, None)
        elif isinstance(e, ev.AgentClaimed) and self.asks:
            self.items[f"claim-{e.seq}"] = Awaited(f"claim-{e.seq}", "claim", e.seq, e.ts)
        elif isinstance(e, ev.Intervention) and e.action == "verdict":
            for key in [k for k, a in self.items.items() if a.kind == "claim"]:
                del self.items[key]
        elif isinstance(e, ev.SessionEnded):
            self.items.clear()  # a resume asks again what it still needs


def awaiting(log: Iterable[ev.Event]) -> list[Awaited]:
    fold = AwaitingFold()
    for e in log:
        fold.apply(e)
    return list(fold.items.values())
