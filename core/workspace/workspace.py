"""The agent's sandbox: a per-session working copy of the user's project.

Every file the agent touches goes through :class:`Workspace`. Paths are confined to the
workspace root (no ``..``, absolute paths, ``~``, NUL bytes, symlinks leading out, special
files, ``.git`` internals or portside's own metadata). Edits are proposed as exact-string
replacements or whole-file writes, reviewed as unified diffs, applied only while the file still
holds the text they were proposed against, and can be reverted the same way. The user's
original tree is never written, except by :meth:`Workspace.write_back`, which only runs when
asked for explicitly.

Layout on disk (``home`` is one directory per workspace)::

    home/workspace.json        metadata; written last, so its presence marks a complete workspace
    home/baseline/manifest.json  what the project looked like when the workspace was created
    home/baseline/blobs/<sha>  contents of baseline files (small ones), for diffs
    home/tree/                 the working copy (with a private git repo of its own, or plain)

The metadata lives beside the tree, not inside it, so neither the agent nor the training runs
(whose working directory is the tree) trip over it.

The class stands on its neighbours, each readable alone: the confinement (``confine.py``), the
names as shown (``names.py``), git (``git_view.py``), what the project's files are and how they
are copied (``tree_listing.py``, ``secret_files.py``), a baseline's file entries
(``file_entries.py``), and the edits and diffs it hands out (``edits.py``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from .confine import RESERVED_NAMES, check_rel, confine, read_at, unlink_at, write_at
from .edits import (
    Change,
    Edit,
    GrepHit,
    GrepHits,
    Listing,
    decode_text,
    diff_lines,
    quote_path,
    split_lines,
)
from .file_entries import BLOB_LIMIT, file_entry, same_entry
from .git_view import git_repo, private_repo, run_git
from .names import WorkspaceError, display_path, real_path
from .path_glob import glob_regex
from .tree_listing import SKIP_DIRS, copy_tree, copyable, visible_files

__all__ = ["MAX_READ_BYTES", "META_FILE", "Workspace"]

MAX_READ_BYTES = 2 * 1024 * 1024
META_FILE = "workspace.json"
META_VERSION = 1


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)


def _rmtree(path: Path) -> None:
    if path.is_symlink():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


def _inside(child: Path, parent: Path) -> bool:
    c, p = os.path.realpath(child), os.path.realpath(parent)
    return os.path.commonpath([c, p]) == p


class Workspace:
    """A confined working copy. Create with :meth:`create`, reattach with :meth:`open`."""

    def __init__(self, home: Path, meta: dict[str, Any]) -> None:
        self.home = Path(os.path.abspath(home))
        self.meta = meta
        self.tree = home / "tree"
        self.root = Path(os.path.realpath(self.tree / meta.get("prefix", "")))
        self._root = str(self.root)
        self.exclude = frozenset(meta.get("exclude", ()))
        self.max_read_bytes = MAX_READ_BYTES
        self._manifest: dict[str, dict[str, Any]] | None = None

    # ---- lifecycle

    @property
    def project(self) -> Path:
        return Path(self.meta["project"])

    @property
    def mode(self) -> str:
        """Either "git" (a copy with a private git repo) or "copy"."""
        return str(self.meta["mode"])

    @property
    def base_commit(self) -> str | None:
        return self.meta.get("base_commit")

    @classmethod
    def create(
        cls,
        project: Path | str,
        root: Path | str,
        *,
        name: str | None = None,
        exclude: Iterable[str] = (),
        secrets: bool = False,
    ) -> Workspace:
        """Make a fresh working copy of ``project`` in a new directory ``root/name``.

        The copy holds what the user sees: for a git project with a commit, tracked plus
        untracked-but-not-ignored files (with their uncommitted changes), in a private git
        repository of its own (never a worktree of the user's: their .git is not shared);
        anything else is copied whole. Directories in :data:`SKIP_DIRS`, names in
        ``exclude`` and, unless ``secrets``, files that look like secrets
        (:func:`is_secret`; listed in ``meta["withheld"]``) are left out.
        """
        project = Path(project)
        if not project.is_dir():
            raise WorkspaceError(f"project {project} is not a directory")
        project = Path(os.path.realpath(project))
        root = Path(os.path.abspath(root))  # git -C would read a relative path from the repo
        repo = git_repo(project)
        guard = repo[0] if repo else project
        if _inside(root, guard):
            raise WorkspaceError(
                f"workspace root {root} is inside the project {guard}; the user's tree is never written"
            )
        name = (
            name
            or f"{re.sub(r'[^A-Za-z0-9._-]', '_', project.name)[:60] or 'project'}-{uuid.uuid4().hex[:8]}"
        )
        if "/" in name or name in (".", "..") or "\x00" in name:
            raise WorkspaceError(f"bad workspace name {name!r}")
        root.mkdir(parents=True, exist_ok=True)
        home = root / name
        try:
            home.mkdir()
        except FileExistsError:
            raise WorkspaceError(f"workspace {home} already exists; open it instead") from None
        excl = frozenset(exclude)
        meta: dict[str, Any] = {
            "version": META_VERSION,
            "project": str(project),
            "mode": "copy",
            "prefix": "",
            "exclude": sorted(excl),
            "created_at": time.time(),
        }
        tree = home / "tree"
        try:
            if repo is not None:
                toplevel, prefix, head = repo
                files, withheld = copyable(project, True, excl, secrets)
                copy_tree(project, tree / prefix, files)
                try:
                    private_repo(tree, toplevel, prefix, files)
                except WorkspaceError:
                    _rmtree(tree)  # no usable git here: a plain copy, made again below
                else:
                    meta.update(mode="git", prefix=prefix, repo=str(toplevel), base_commit=head)
            if meta["mode"] == "copy":
                files, withheld = copyable(project, False, excl, secrets)
                copy_tree(project, tree, files)
            meta["withheld"] = withheld
            ws = cls(home, meta)
            ws._write_baseline()
            _write_json(home / META_FILE, meta)
        except BaseException:
            _rmtree(home)
            raise
        return ws

    @property
    def withheld(self) -> list[str]:
        """Secret-looking project files not copied into this workspace."""
        return list(self.meta.get("withheld", ()))

    @classmethod
    def open(cls, path: Path | str) -> Workspace:
        """Reattach to a workspace, given its home directory (``ws.home``) or its root."""
        real = Path(os.path.realpath(path))
        for home in (real, *real.parents):
            meta_path = home / META_FILE
            if not meta_path.is_file():
                continue
            try:
                meta = json.loads(meta_path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise WorkspaceError(
                    f"workspace metadata {meta_path} is unreadable: {exc}"
                ) from None
            ws = cls(home, meta)
            if home != real and ws.root != real:
                break  # a workspace.json that belongs to something else
            if meta.get("version") != META_VERSION:
                raise WorkspaceError(f"workspace {home} has metadata version {meta.get('version')}")
            if not ws.root.is_dir():
                raise WorkspaceError(f"workspace {home} has lost its tree {ws.root}")
            return ws
        raise WorkspaceError(f"{path} is not a portside workspace (no {META_FILE})")

    @staticmethod
    def pristine_copy(
        project: Path | str, dest: Path | str, *, exclude: Iterable[str] = (),
        secrets: bool = False,
    ) -> Path:
        """A plain copy of ``project`` for reference runs (runs write files; the user's tree is
        never written). Unlike a workspace it keeps git-ignored files, since runs need data;
        like one, it leaves out secret-looking files unless ``secrets``."""
        project, dest = Path(project), Path(os.path.abspath(dest))
        if not project.is_dir():
            raise WorkspaceError(f"project {project} is not a directory")
        if _inside(dest, project):
            raise WorkspaceError(f"copy destination {dest} is inside the project {project}")
        if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
            raise WorkspaceError(f"copy destination {dest} exists and is not an empty directory")
        src = Path(os.path.realpath(project))
        copy_tree(src, dest, copyable(src, False, frozenset(exclude), secrets)[0])
        return dest

    def dispose(self) -> None:
        """Remove the working copy and its metadata (and, for a workspace made by an older
        portside as a worktree of the user's repo, its registration there)."""
        if self.mode == "git" and (self.tree / ".git").is_file() and Path(self.meta["repo"]).is_dir():
            proc = run_git(
                self.meta["repo"],
                "worktree",
                "remove",
                "--force",
                "--force",
                str(self.tree),
                check=False,
            )
            if proc.returncode != 0:
                _rmtree(self.tree)
                run_git(self.meta["repo"], "worktree", "prune", check=False)
        _rmtree(self.home)

    # ---- paths and reading

    def resolve(self, rel: str) -> Path:
        """The real path of ``rel`` inside the workspace; WorkspaceError if it would leave it."""
        return Path(confine(self._root, real_path(rel))[0])

    def relpath(self, rel: str) -> str:
        """``rel`` normalised (real path relative to the root, POSIX separators), as shown."""
        return display_path("/".join(confine(self._root, real_path(rel))[1]))

    def exists(self, rel: str) -> bool:
        return self.resolve(rel).exists()

    def _walk(self) -> Iterator[str]:
        for dirpath, dirs, files in os.walk(self._root):
            rel_dir = os.path.relpath(dirpath, self._root)
            prefix = "" if rel_dir == "." else rel_dir.replace(os.sep, "/") + "/"
            dirs[:] = sorted(
                d
                for d in dirs
                if d not in SKIP_DIRS
                and d not in self.exclude
                and d not in RESERVED_NAMES
                and not os.path.islink(os.path.join(dirpath, d))
            )
            for f in sorted(files):
                if f in RESERVED_NAMES or f in self.exclude or f.startswith(".portside-tmp-"):
                    continue
                full = os.path.join(dirpath, f)
                if os.path.islink(full):
                    # Listed only when it points at a regular file inside the workspace.
                    try:
                        real, _ = confine(self._root, prefix + f)
                    except WorkspaceError:
                        continue
                    if not os.path.isfile(real):
                        continue
                else:
                    try:
                        if not stat.S_ISREG(os.lstat(full).st_mode):
                            continue
                    except OSError:
                        continue  # removed while walking
                yield prefix + f

    def list_files(self, pattern: str | None = None, limit: int = 1000) -> Listing:
        """Files matching a glob (``**`` crosses directories; a pattern without '/' matches
        the file name at any depth; a directory name lists everything under it)."""
        pat = (pattern or "").strip()
        if pat.startswith("./"):
            pat = pat[2:]
        if pat and not any(c in pat for c in "*?["):
            real, parts = confine(self._root, real_path(pat))  # refuses hostile names here too
            if os.path.isdir(real):
                pat = display_path("/".join(parts)) + "/**" if parts else ""
        rx = glob_regex(pat) if pat else None
        on_name = bool(pat) and "/" not in pat
        out = Listing()
        for rel in map(display_path, self._walk()):  # matched and listed as shown
            if rx is None or rx.match(rel.rsplit("/", 1)[-1] if on_name else rel):
                if len(out) >= limit:
                    out.truncated = True
                    break
                out.append(rel)
        return out

    def _read_text(self, rel: str, limit: int | None) -> tuple[str, str | None]:
        """(normalised path as shown, text or None when missing). Refuses binary files."""
        _, parts = confine(self._root, real_path(rel))
        data = read_at(self._root, parts, rel, limit)
        shown = display_path("/".join(parts))
        if data is None:
            return shown, None
        text = decode_text(data)
        if text is None:
            raise WorkspaceError(
                f"{rel} is a binary file (not UTF-8 text); it cannot be read or edited as text"
            )
        return shown, text

    def read_file(
        self, rel: str, start_line: int | None = None, end_line: int | None = None
    ) -> str:
        """The text of a file, or lines ``start_line``..``end_line`` (1-based, inclusive)."""
        _, text = self._read_text(rel, self.max_read_bytes)
        if text is None:
            raise WorkspaceError(f"{rel} does not exist")
        if start_line is None and end_line is None:
            return text
        lines = split_lines(text)
        start = 1 if start_line is None else start_line
        end = len(lines) if end_line is None else end_line
        if start < 1 or (end_line is not None and end_line < start):
            raise WorkspaceError(
                f"bad line range {start_line}..{end_line} for {rel}; lines start at 1"
            )
        if start > max(len(lines), 1):
            raise WorkspaceError(
                f"{rel} has {len(lines)} lines; start_line {start} is past the end"
            )
        return "".join(lines[start - 1 : end])

    def grep(self, regex: str, glob: str | None = None, limit: int = 200) -> GrepHits:
        """Lines matching ``regex`` in text files (optionally only files matching ``glob``)."""
        try:
            rx = re.compile(regex)
        except re.error as exc:
            raise WorkspaceError(f"bad regular expression {regex!r}: {exc}") from None
        hits = GrepHits()
        for rel in self.list_files(glob, limit=100_000):
            if os.path.islink(os.path.join(self._root, real_path(rel))):
                continue  # its target is searched under its own name
            try:
                _, text = self._read_text(rel, self.max_read_bytes)
            except WorkspaceError:
                continue  # binary or too large: not searchable as text
            for no, line in enumerate((text or "").split("\n"), 1):
                if rx.search(line):
                    if len(hits) >= limit:
                        hits.truncated = True
                        return hits
                    hits.append(GrepHit(rel, no, line if len(line) <= 400 else line[:400] + "..."))
        return hits

    # ---- edits

    def propose_replace(self, rel: str, old: str, new: str, *, edit_id: str | None = None) -> Edit:
        """An edit replacing the one occurrence of ``old`` with ``new``. Nothing is written."""
        path, text = self._read_text(rel, self.max_read_bytes)
        if text is None:
            raise WorkspaceError(f"{rel} does not exist; write the whole file to create it")
        if not old:
            raise WorkspaceError(f"the text to replace in {rel} is empty")
        if old == new:
            raise WorkspaceError(f"the replacement for {rel} is identical to the original text")
        count = text.count(old)
        if count == 0 and "\r\n" in text and "\n" in old and "\r\n" not in old:
            # The agent usually writes "\n"; meet a CRLF file halfway.
            old, new = old.replace("\n", "\r\n"), new.replace("\n", "\r\n")
            count = text.count(old)
        if count == 0:
            raise WorkspaceError(
                f"the text to replace was not found in {rel} (0 matches); read the file again and "
                "copy the text exactly, including whitespace"
            )
        if count > 1:
            starts = [m.start() for m in re.finditer(re.escape(old), text)]
            lines = ", ".join(str(text.count("\n", 0, s) + 1) for s in starts[:10])
            raise WorkspaceError(
                f"the text to replace occurs {count} times in {rel} (at lines {lines}); include "
                "more surrounding text so it matches exactly once"
            )
        return Edit(edit_id or uuid.uuid4().hex[:12], path, text, text.replace(old, new, 1))

    def propose_write(self, rel: str, content: str, *, edit_id: str | None = None) -> Edit:
        """An edit setting the whole file to ``content`` (creating it, and any missing
        directories, if needed). Nothing is written."""
        if not isinstance(content, str):
            raise WorkspaceError(f"content for {rel} must be text")
        path, text = self._read_text(rel, self.max_read_bytes)
        if not path:
            raise WorkspaceError(f"{rel!r} is the workspace root, not a file")
        if self.resolve(rel).is_dir():
            raise WorkspaceError(f"{rel} is a directory")
        if text == content:
            raise WorkspaceError(f"writing {rel} would not change it")
        return Edit(
            edit_id or uuid.uuid4().hex[:12], path, text or "", content, new_file=text is None
        )

    def _current(self, edit: Edit) -> tuple[list[str], str | None]:
        _, parts = confine(self._root, real_path(edit.path))
        data = read_at(self._root, parts, edit.path, None)
        if data is None:
            return parts, None
        text = decode_text(data)
        if text is None:
            raise WorkspaceError(
                f"{edit.path} is now a binary file; edit {edit.edit_id} no longer applies"
            )
        return parts, text

    def apply(self, edit: Edit, after: str | None = None) -> Edit:
        """Write an approved edit (``after`` overrides its text, for a reviewer-edited
        proposal). Refused unless the file still holds ``edit.before``. Returns the edit as
        applied, which is what :meth:`revert` takes."""
        if after is not None:
            edit = replace(edit, after=after)
        parts, current = self._current(edit)
        if edit.new_file:
            if current is not None:
                raise WorkspaceError(
                    f"{edit.path} was created since edit {edit.edit_id} was proposed as a new file; "
                    "the edit no longer applies"
                )
        elif current is None:
            raise WorkspaceError(
                f"{edit.path} was deleted since edit {edit.edit_id} was proposed; the edit no longer applies"
            )
        elif current != edit.before:
            raise WorkspaceError(
                f"{edit.path} changed since edit {edit.edit_id} was proposed: its content is not "
                "what the edit was made against, so the edit no longer applies; propose it again"
            )
        write_at(self._root, parts, edit.path, edit.after.encode("utf-8"))
        return edit

    def revert(self, edit: Edit) -> None:
        """Undo an applied edit; refused unless the file still holds ``edit.after``."""
        parts, current = self._current(edit)
        if current != edit.after:
            state = "is missing" if current is None else "no longer holds the edit's text"
            raise WorkspaceError(
                f"cannot revert edit {edit.edit_id}: {edit.path} {state} (was it applied, or "
                "changed since?)"
            )
        if edit.new_file:
            unlink_at(self._root, parts, edit.path)
        else:
            write_at(self._root, parts, edit.path, edit.before.encode("utf-8"))

    # ---- baseline, changes, patches

    @property
    def _baseline_dir(self) -> Path:
        return self.home / "baseline"

    def _visible(self) -> list[str]:
        return visible_files(self.root, self.mode == "git", self.exclude, self.tree)

    def _write_baseline(self) -> None:
        blobs = self._baseline_dir / "blobs"
        blobs.mkdir(parents=True, exist_ok=True)
        manifest: dict[str, dict[str, Any]] = {}
        for rel in self._visible():
            entry = file_entry(self.root, rel)
            if entry is None:
                continue
            if entry["kind"] == "file" and entry["size"] <= BLOB_LIMIT:
                blob = blobs / entry["sha"]
                if not blob.exists():
                    shutil.copyfile(self.root / rel, blob)
                    os.chmod(blob, 0o444)
                entry["blob"] = True
            manifest[rel] = entry
        _write_json(self._baseline_dir / "manifest.json", manifest)
        self._manifest = manifest

    @property
    def baseline(self) -> dict[str, dict[str, Any]]:
        """What each project file looked like when the workspace was created."""
        if self._manifest is None:
            self._manifest = json.loads(
                (self._baseline_dir / "manifest.json").read_text(encoding="utf-8")
            )
        return self._manifest

    def _baseline_text(self, rel: str) -> str | None:
        entry = self.baseline.get(rel)
        if entry is None or entry["kind"] != "file" or not entry.get("blob"):
            return None
        return decode_text((self._baseline_dir / "blobs" / entry["sha"]).read_bytes())

    def _norm(self, rel: str) -> str:
        # Lexical only: a deleted file has nothing on disk left to resolve.
        return "/".join(check_rel(real_path(rel)))

    def _diffable(
        self, paths: Iterable[str] | None = None
    ) -> Iterator[
        tuple[Change, str | None, str | None, dict[str, Any] | None, dict[str, Any] | None]
    ]:
        base = self.baseline
        only = None if paths is None else {self._norm(p) for p in paths}
        current = {}
        for rel in self._visible():
            if only is not None and rel not in only:
                continue
            entry = file_entry(self.root, rel, base.get(rel))
            if entry is not None:
                current[rel] = entry
        for rel in sorted(set(base) | set(current)):
            if only is not None and rel not in only:
                continue
            b, c = base.get(rel), current.get(rel)
            if same_entry(b, c):
                continue
            status = "added" if b is None else "deleted" if c is None else "modified"
            old = new = None
            reason = ""
            if (b and b["kind"] == "link") or (c and c["kind"] == "link"):
                reason = "symlink"
            else:
                if b is not None:
                    old = self._baseline_text(rel)
                    if old is None:
                        reason = "binary or too large"
                if c is not None and not reason:
                    if c["size"] > BLOB_LIMIT:
                        reason = "too large"
                    else:
                        data = read_at(self._root, rel.split("/"), rel, None)
                        new = None if data is None else decode_text(data)
                        if new is None:
                            reason = "binary"
            yield Change(rel, status, not reason, reason), old, new, b, c

    def changes(self, paths: Iterable[str] | None = None) -> list[Change]:
        """Every path that differs from the baseline; ``patchable`` ones are in the patch
        (paths as shown: :func:`display_path`)."""
        return [replace(change, path=display_path(change.path))
                for change, *_ in self._diffable(paths)]

    def diff_patch(self, paths: Iterable[str] | None = None) -> str:
        """The workspace against its baseline as a ``git diff``-style patch, appliable with
        ``git apply`` (or ``patch -p1``) to the project as it was when the workspace was
        made. Binary/oversized files and symlinks are left out; see :meth:`changes`.
        ``paths`` limits it to those files (e.g. the ones approved edits touched, leaving out
        what runs wrote)."""
        out: list[str] = []
        for change, old, new, b, c in self._diffable(paths):
            if not change.patchable:
                continue
            a_name, b_name = quote_path("a/" + change.path), quote_path("b/" + change.path)
            out.append(f"diff --git {a_name} {b_name}\n")
            if b is None:
                out.append(f"new file mode {c['mode']}\n")  # type: ignore[index]
                a_name = "/dev/null"
            elif c is None:
                out.append(f"deleted file mode {b['mode']}\n")
                b_name = "/dev/null"
            elif b["mode"] != c["mode"]:
                out.append(f"old mode {b['mode']}\nnew mode {c['mode']}\n")
            out.extend(diff_lines(old or "", new or "", a_name, b_name, 3))
        return "".join(out)

    def export_patch(self, path: Path | str, paths: Iterable[str] | None = None) -> Path:
        path = Path(path)
        if _inside(path, self.project):
            raise WorkspaceError(
                f"refusing to write the patch inside the project {self.project}; use write_back"
            )
        path.write_text(self.diff_patch(paths), encoding="utf-8")
        return path

    def write_back(
        self,
        project: Path | str | None = None,
        force: bool = False,
        paths: Iterable[str] | None = None,
    ) -> list[str]:
        """Copy the workspace's patchable changes into the user's project. Only on explicit
        request. Refused (unless ``force``) for any file the user changed since the workspace
        was made. Returns the paths written or deleted."""
        target = Path(os.path.realpath(project if project is not None else self.project))
        troot = str(target)
        plan = [(ch, c) for ch, _old, _new, _b, c in self._diffable(paths) if ch.patchable]
        if not force:
            conflicts = []
            for ch, _ in plan:
                _, parts = confine(troot, ch.path)
                base = self.baseline.get(ch.path)
                data = read_at(troot, parts, ch.path, None)
                theirs = None if data is None else hashlib.sha256(data).hexdigest()
                if theirs != (base["sha"] if base else None):
                    conflicts.append(ch.path)
            if conflicts:
                raise WorkspaceError(
                    f"not writing back: {', '.join(conflicts)} changed in {target} since the "
                    "workspace was made; export a patch instead, or force"
                )
        done = []
        for ch, c in plan:
            _, parts = confine(troot, ch.path)
            if c is None:
                unlink_at(troot, parts, ch.path)
            else:
                mode = 0o755 if c["mode"] == "100755" else 0o644
                data = read_at(self._root, ch.path.split("/"), ch.path, None) or b""
                write_at(troot, parts, ch.path, data, mode)
            done.append(display_path(ch.path))
        return done

    def __repr__(self) -> str:
        return f"Workspace(root={str(self.root)!r}, mode={self.mode!r})"
