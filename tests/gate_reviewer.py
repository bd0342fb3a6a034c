"""The reviewer a whole-agent test plays (Claude Code, Codex): it answers the gate's pending
proposals in order and notes what the workspace held while each was on screen, and it gives
the verdict on a claim; plus the byte image of a tree, for "the user's project is untouched"."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from portside.core.log import events as ev
from portside.core.session.engine import SessionEngine


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


class Reviewer:
    """Answers (``approve`` / ``reject`` with a reason / ``edit`` with the text) the pending
    proposals in order; ``seen`` holds (path, after, workspace text then) for each, or
    (``$ cwd``, command, None) for a command. A claim gets pass unless an error is open."""

    def __init__(self, engine: SessionEngine, events: list[ev.Event],
                 answers: list[tuple[str, str]]) -> None:
        self.engine = engine
        self.events = events  # what the engine published (a MemorySink's list)
        self.answers = list(answers)
        self.seen: list[tuple[str, str, str | None]] = []

    async def run(self) -> None:
        gate = self.engine.gate
        while True:
            await asyncio.sleep(0.05)
            if gate.pending_claim() is not None:
                gate.verdict("pass" if not gate.open_errors() else "fail", "checked")
                continue
            edits = gate.pending_edits()
            if not edits or not self.answers:
                continue
            item = edits[0]
            proposed = next(e for e in reversed(self.events)
                            if isinstance(e, ev.EditProposed | ev.CommandProposed)
                            and item.item_id in (getattr(e, "edit_id", ""),
                                                 getattr(e, "command_id", "")))
            ws = self.engine.workspace
            if isinstance(proposed, ev.CommandProposed):
                self.seen.append((f"$ {proposed.cwd}", proposed.command, None))
            else:
                disk = None
                if ws is not None and ws.exists(proposed.path):
                    disk = ws.read_file(proposed.path)
                self.seen.append((proposed.path, proposed.after, disk))
            action, note = self.answers.pop(0)
            if action == "approve":
                gate.approve(item.item_id)
            elif action == "reject":
                gate.reject(item.item_id, note)
            else:
                gate.edit(item.item_id, note)

    def session(self, timeout_s: float) -> Any:
        """Run the engine to its end with this reviewer beside it; the engine's result."""
        async def main() -> Any:
            rev = asyncio.create_task(self.run())
            try:
                return await asyncio.wait_for(self.engine.run(), timeout_s)
            finally:
                rev.cancel()

        return asyncio.run(main())
