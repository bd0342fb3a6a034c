"""The project as it was before a session, as portside kept it, against a tree after it.

A workspace keeps a baseline when it is made (core/workspace/workspace.py: every project file's
entry, and the file itself up to ``BLOB_LIMIT``). For an attached session that is the user's
tree before the session (the workspace followed the tree, and the user's own Claude Code wrote
the tree itself), so the baseline against the tree now is the session's whole change: the card
edits and what its commands changed alike. :func:`changes_since` lists it, and
:func:`put_back` turns a copy of the tree after into the tree before.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .confine import unlink_confined, write_confined
from .edits import Edit, decode_text
from .file_entries import BLOB_LIMIT, file_entry, same_entry
from .git_view import git_repo
from .names import WorkspaceError
from .secret_files import is_secret
from .tree_listing import visible_files
from .workspace import Workspace


@dataclass(frozen=True)
class FileChange:
    """One project file that differs between before and after (texts None: binary, too large,
    a symlink, or absent on that side)."""

    path: str
    status: str  # "added" | "modified" | "deleted"
    before: str | None
    after: str | None

    def stats(self) -> tuple[int, int] | None:
        """(lines added, lines removed), or None where a side is not text."""
        if (self.before is None and self.status != "added") or (
                self.after is None and self.status != "deleted"):
            return None
        return self._edit().stats()

    def unified_diff(self) -> str:
        return "" if self.stats() is None else self._edit().unified_diff()

    def _edit(self) -> Edit:
        return Edit("", self.path, self.before or "", self.after or "",
                    new_file=self.status == "added")

    def to_json(self) -> dict[str, Any]:
        s = self.stats()
        return {"path": self.path, "status": self.status,
                **({"added": s[0], "removed": s[1]} if s else {"text": False})}


@dataclass
class Before:
    """One side "before": its files' entries and a way to read each file's bytes (None when
    not kept)."""

    entries: dict[str, dict[str, Any]]
    read: Callable[[str], bytes | None]
    where: str  # said in errors

    @classmethod
    def of_workspace(cls, ws: Workspace) -> Before:
        blobs = ws.home / "baseline" / "blobs"

        def read(rel: str) -> bytes | None:
            e = ws.baseline.get(rel)
            if e is None or e.get("kind") != "file" or not e.get("blob"):
                return None
            return (blobs / e["sha"]).read_bytes()

        return cls(dict(ws.baseline), read, f"portside's copy of the tree before ({ws.home})")

    @classmethod
    def of_tree(cls, tree: Path, use_git: bool) -> Before:
        entries = _entries(tree, use_git, {})

        def read(rel: str) -> bytes | None:
            return None if entries[rel]["kind"] != "file" else (tree / rel).read_bytes()

        return cls(entries, read, str(tree))


def _entries(tree: Path, use_git: bool, known: dict[str, dict[str, Any]]
             ) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for rel in visible_files(tree, use_git and git_repo(tree) is not None, frozenset()):
        if (e := file_entry(tree, rel, known.get(rel))) is not None:
            out[rel] = e
    return out


def _kept(rel: str, skip_top: frozenset[str]) -> bool:
    return rel.split("/")[0] not in skip_top and not is_secret(rel)


def changes_since(before: Before, after: Path, *, use_git: bool,
                  skip_top: Iterable[str] = ()) -> list[FileChange]:
    """Every project file of ``after`` that differs from ``before`` (secret-looking files and
    top-level folders in ``skip_top`` left out, as the copies leave them out)."""
    skip = frozenset(skip_top)
    base = {r: e for r, e in before.entries.items() if _kept(r, skip)}
    now = {r: e for r, e in _entries(after, use_git, base).items() if _kept(r, skip)}
    out = []
    for rel in sorted(set(base) | set(now)):
        b, c = base.get(rel), now.get(rel)
        if same_entry(b, c):
            continue
        old = decode_text(data) if b is not None and (data := before.read(rel)) is not None else None
        new = None
        if c is not None and c["kind"] == "file" and c["size"] <= BLOB_LIMIT:
            new = decode_text((after / rel).read_bytes())
        out.append(FileChange(rel, "added" if b is None else "deleted" if c is None
                              else "modified", old, new))
    return out


def put_back(copy: Path, before: Before, changes: list[FileChange]) -> None:
    """Make ``copy`` (of the tree after) the tree before: each changed file as it was, each
    added one removed. A changed file portside did not keep (over ``BLOB_LIMIT``) or a
    symlink that changed cannot be put back: WorkspaceError naming it."""
    for ch in changes:
        if ch.status == "added":
            unlink_confined(copy, ch.path)
            continue
        entry = before.entries[ch.path]
        data = before.read(ch.path) if entry["kind"] == "file" else None
        if data is None:
            raise WorkspaceError(f"{ch.path}: changed since before the session, and "
                                 f"{before.where} does not hold it (a symlink, or over "
                                 f"{BLOB_LIMIT} bytes)")
        write_confined(copy, ch.path, data)
        os.chmod(copy / ch.path, 0o755 if entry.get("mode") == "100755" else 0o644)


__all__ = ["Before", "FileChange", "changes_since", "put_back"]
