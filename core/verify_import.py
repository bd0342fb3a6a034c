"""Verifying an imported Claude Code session: the references run on the project as it was before
the session, the candidate on the tree the session left, both rebuilt as copies from the
session's own edits (the user's tree is never written).

Claude Code edits the project in place, so the folder it worked in usually holds the tree after
the session (``tree_after``); the tree before is that folder with each edited file put back to
its text before the session's first edit of it (a file the session created is left out).
Given the tree before instead (``tree_before``: a checkout of the commit the session started
from), the tree after is it with each file's text after the last edit. Either way every edited
file must hold the text the transcript says it had there, or the trees are refused with the
file named: a tree changed since the session would verify something else.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import events as ev
from .import_claude_code import edited_files
from .workspace import Workspace, WorkspaceError

if TYPE_CHECKING:
    from .engine import SessionEngine


class TreeError(ValueError):
    """The trees of an imported session cannot be rebuilt; the message says which file."""


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise TreeError(f"{path}: cannot read: {exc}") from None


def prepare_trees(events: list[ev.Event], dest: Path, *, tree_after: Path | None = None,
                  tree_before: Path | None = None) -> tuple[Path, Path]:
    """(reference tree, candidate tree), made under ``dest`` from exactly one of
    ``tree_after`` / ``tree_before``. Raises TreeError naming the file that does not fit."""
    if (tree_after is None) == (tree_before is None):
        raise TreeError("give the project as the session left it or as it was before, not both")
    started = events[0] if events and isinstance(events[0], ev.SessionStarted) else None
    partial = (started.meta.get("partial_edits") if started else None) or []
    if partial:
        raise TreeError(f"the transcript has only the changed text of {', '.join(partial)} "
                        "(not the whole file): its trees cannot be rebuilt")
    secret = (started.meta.get("redacted_files") if started else None) or []
    if secret:
        raise TreeError(f"{', '.join(secret)} held a secret, masked in the store: its trees "
                        "cannot be rebuilt from the session")
    files = edited_files(events)
    created = set((started.meta.get("created_files") if started else None) or [])
    if not files:
        raise TreeError("the session applied no edit inside its folder: nothing to verify")
    source = tree_after or tree_before
    assert source is not None
    after = tree_after is not None
    for rel, (first, last) in sorted(files.items()):
        expected: str | None = last if after else (None if rel in created else first)
        have = _read(source / rel)
        if have != expected:
            state = "missing" if have is None else "different"
            when = "the session's last edit left" if after else "the session's first edit found"
            raise TreeError(f"{source / rel}: {state} from the text {when} (changed since the "
                            f"session?); pass the project as it was "
                            f"{'before the session (--before)' if after else 'after it (--tree)'}"
                            " instead")
    ref, cand = dest / "reference", dest / "candidate"
    try:
        for d in (ref, cand):
            Workspace.pristine_copy(source, d)
    except WorkspaceError as exc:
        raise TreeError(str(exc)) from None
    target = ref if after else cand
    for rel, (first, last) in files.items():
        path = target / rel
        text = first if after else last
        if after and rel in created:
            path.unlink(missing_ok=True)  # created by the session: not in the tree before
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return ref, cand


def check_outside_claim(engine: SessionEngine, claim: str) -> ev.AlarmRaised | None:
    """The imported agent's last message claimed success and the candidate's checks say
    otherwise: ``agent-claim-contradicted`` (critical), as the live Stop hook raises it."""
    from .agent.claude_code import claims_success
    from .checks import agent_claim_contradicted

    errors = [a for a in engine.ledger.open_errors() if a.check != "agent-claim-contradicted"]
    if not claim or not errors or not claims_success(claim):
        return None
    alarm = agent_claim_contradicted(claim, [], ", ".join(a.check for a in errors))
    alarm = dataclasses.replace(alarm, severity="critical")
    return engine.raise_alarm(alarm, at="imported session's last message",
                              open_alarms=[{"check": a.check, "title": a.title} for a in errors])


def imported_claim(events: list[ev.Event]) -> str:
    claims = [e.summary for e in events if isinstance(e, ev.AgentClaimed)]
    return claims[-1] if claims else ""


def verify_meta(events: list[ev.Event], source: Path, after: bool) -> dict[str, Any]:
    started = events[0]
    assert isinstance(started, ev.SessionStarted)
    return {"verifies": started.session_id,
            "claude_code_session": started.meta.get("claude_code_session", ""),
            "tree": str(source), "tree_is": "after the session" if after else "before it",
            "edited_files": sorted(edited_files(events))}


__all__ = ["TreeError", "check_outside_claim", "imported_claim", "prepare_trees", "verify_meta"]
