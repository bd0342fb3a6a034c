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

Only the session's folder is rebuilt: an edit whose path is absolute outside it, has ``..``, or
leads out through a symlink in the tree is listed (``edits_outside_folder``) and never written,
and every write into the copies goes through descriptors that follow no symlink.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from portside.core.log import events as ev
from portside.core.workspace.confine import (
    confined_parts,
    read_confined,
    unlink_confined,
    write_confined,
)
from portside.core.workspace.names import WorkspaceError
from portside.core.workspace.workspace import Workspace


def edited_files(events: list[ev.Event]) -> dict[str, tuple[str, str]]:
    """path (relative to the session's cwd) → (text before the session's first applied edit of
    it, text after its last). A file the session created has "" before."""
    proposed = {e.edit_id: e for e in events if isinstance(e, ev.EditProposed)
                and ev.is_file_edit(e)}
    out: dict[str, tuple[str, str]] = {}
    for e in events:
        if isinstance(e, ev.EditApplied) and e.edit_id in proposed:
            p = proposed[e.edit_id]
            first = out[p.path][0] if p.path in out else p.before
            out[p.path] = (first, p.after)
    return out



class TreeError(ValueError):
    """The trees of an imported session cannot be rebuilt; the message says which file."""


def _read(root: Path, rel: str) -> str | None:
    try:
        data = read_confined(root, rel)
    except WorkspaceError as exc:
        raise TreeError(f"{root / rel}: cannot read: {exc}") from None
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TreeError(f"{root / rel}: cannot read: {exc}") from None


def split_edits(events: list[ev.Event], source: Path
                ) -> tuple[dict[str, tuple[str, str]], list[str]]:
    """(the edited files inside the session's folder, the paths of the others). A path from a
    transcript is inside only when it is relative, has no ``..`` and resolves under ``source``
    without a symlink leading out: what lies outside was the user's, never the copies', and
    verifying must never write it (the import keeps it, shown as an edit)."""
    inside: dict[str, tuple[str, str]] = {}
    outside: list[str] = []
    for rel, texts in edited_files(events).items():
        try:
            confined_parts(source, rel)
            inside[rel] = texts
        except WorkspaceError:
            outside.append(rel)
    return inside, sorted(outside)


def _check_source(files: dict[str, tuple[str, str]], created: set[str], source: Path,
                  after: bool) -> None:
    """Every edited file holds the text the transcript says it had there, or TreeError."""
    for rel, (first, last) in sorted(files.items()):
        expected: str | None = last if after else (None if rel in created else first)
        have = _read(source, rel)
        if have != expected:
            state = "missing" if have is None else "different"
            when = "the session's last edit left" if after else "the session's first edit found"
            raise TreeError(f"{source / rel}: {state} from the text {when} (changed since the "
                            f"session?); pass the project as it was "
                            f"{'before the session (--before)' if after else 'after it (--tree)'}"
                            " instead")


def _rebuild(target: Path, files: dict[str, tuple[str, str]], created: set[str],
             after: bool) -> None:
    """Put each edited file of the copy ``target`` to its other side of the session, through
    descriptors that never follow a symlink (a link in the copy cannot lead a write out)."""
    try:
        for rel, (first, last) in files.items():
            if after and rel in created:
                unlink_confined(target, rel)  # created by the session: not in the tree before
            else:
                write_confined(target, rel, (first if after else last).encode("utf-8"))
    except WorkspaceError as exc:
        raise TreeError(f"{target}: {exc}") from None


def prepare_trees(events: list[ev.Event], dest: Path, *, tree_after: Path | None = None,
                  tree_before: Path | None = None) -> tuple[Path, Path]:
    """(reference tree, candidate tree), made under ``dest`` from exactly one of
    ``tree_after`` / ``tree_before``. Raises TreeError naming the file that does not fit.
    Edits outside the session's folder (:func:`split_edits`) are left out, never written."""
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
    source = tree_after or tree_before
    assert source is not None
    files, _outside = split_edits(events, source)
    created = set((started.meta.get("created_files") if started else None) or [])
    if not files:
        raise TreeError("the session applied no edit inside its folder: nothing to verify")
    after = tree_after is not None
    _check_source(files, created, source, after)
    ref, cand = dest / "reference", dest / "candidate"
    try:
        for d in (ref, cand):
            Workspace.pristine_copy(source, d)
    except WorkspaceError as exc:
        raise TreeError(str(exc)) from None
    _rebuild(ref if after else cand, files, created, after)
    return ref, cand


def imported_claim(events: list[ev.Event]) -> str:
    claims = [e.summary for e in events if isinstance(e, ev.AgentClaimed)]
    return claims[-1] if claims else ""


def verify_meta(events: list[ev.Event], source: Path, after: bool) -> dict[str, Any]:
    started = events[0]
    assert isinstance(started, ev.SessionStarted)
    files, outside = split_edits(events, source)
    return {"verifies": started.session_id,
            "claude_code_session": started.meta.get("claude_code_session", ""),
            "tree": str(source), "tree_is": "after the session" if after else "before it",
            "edited_files": sorted(files), "edits_outside_folder": outside}


__all__ = ["TreeError", "imported_claim", "prepare_trees", "split_edits",
           "verify_meta"]
