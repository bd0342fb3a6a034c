"""Verifying an attached session (`portside attach`): the references on the user's tree as it
was before the session, the candidate on the tree as it is now, both as copies (the user's
tree is never written).

Attached, Claude Code works in the user's own tree, and its commands change files no card
showed (``tree-changed``), so the log's edits alone are not the whole change. The tree before
is what portside kept when the session started: its workspace's baseline
(core/workspace/baseline.py), found through the session's recorded workdir; or, given
``tree_before``, that folder. The whole change is that against the tree after, file by file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from portside.core.claude_code.attached import NOT_SYNCED
from portside.core.claude_code.trees import TreeError, edited_files
from portside.core.log import events as ev
from portside.core.workspace.baseline import Before, FileChange, changes_since, put_back
from portside.core.workspace.names import WorkspaceError
from portside.core.workspace.workspace import Workspace


@dataclass
class AttachedTrees:
    reference: Path
    candidate: Path
    changes: list[FileChange]
    before_is: str  # where the tree before came from, said in the meta


def is_attached(started: ev.SessionStarted) -> bool:
    return bool(started.meta.get("attached_tree"))


def _kept_before(started: ev.SessionStarted) -> tuple[Before, bool]:
    """(the tree before as portside kept it, whether it was a git project), or TreeError."""
    workdir = str((started.meta.get("resume") or {}).get("workdir") or "")
    home = Path(workdir) / "workspaces" / started.session_id
    try:
        ws = Workspace.open(home)
        return Before.of_workspace(ws), ws.mode == "git"
    except (WorkspaceError, OSError, ValueError) as exc:
        raise TreeError(f"the tree before the session, kept in {home}, is not there ({exc}); "
                        "give it (--before DIR)") from None


def prepare_attached(events: list[ev.Event], dest: Path, tree_after: Path,
                     tree_before: Path | None = None) -> AttachedTrees:
    """(reference, candidate) copies under ``dest`` and the whole change between them."""
    started = events[0]
    assert isinstance(started, ev.SessionStarted)
    if not any(isinstance(e, ev.SessionEnded) for e in events):
        raise TreeError("the attached session has not ended: verify it once it has")
    if tree_before is not None:
        from portside.core.workspace.git_view import git_repo

        before = Before.of_tree(tree_before, git_repo(tree_before) is not None)
        use_git, before_is = git_repo(tree_after) is not None, str(tree_before)
    else:
        before, use_git = _kept_before(started)
        before_is = "kept by portside when the session started"
    ref, cand = dest / "reference", dest / "candidate"
    try:
        changes = changes_since(before, tree_after, use_git=use_git, skip_top=NOT_SYNCED)
        if not changes:
            raise TreeError(f"{tree_after} is as it was before the session: nothing to verify")
        for d in (ref, cand):
            Workspace.pristine_copy(tree_after, d)
        put_back(ref, before, changes)
    except (WorkspaceError, OSError) as exc:
        raise TreeError(str(exc)) from None
    return AttachedTrees(ref, cand, changes, before_is)


def attached_meta(events: list[ev.Event], tree_after: Path, trees: AttachedTrees
                  ) -> dict[str, Any]:
    started = events[0]
    assert isinstance(started, ev.SessionStarted)
    return {"verifies": started.session_id, "tree": str(tree_after),
            "tree_is": "after the session", "tree_before": trees.before_is,
            "edited_files": sorted(edited_files(events)),
            "changed_files": [c.to_json() for c in trees.changes],
            "edits_outside_folder": []}


def change_lines(changes: list[FileChange]) -> list[str]:
    """The whole change, one line a file: ``M train.py +1 -1``."""
    out = []
    for c in changes:
        s = c.stats()
        out.append(f"{c.status[0].upper()} {c.path} " + (f"+{s[0]} -{s[1]}" if s else "(binary)"))
    return out


__all__ = ["AttachedTrees", "attached_meta", "change_lines", "is_attached", "prepare_attached"]
