"""The files a user would call "the project" (git-aware: tracked plus untracked-but-not-ignored
in a repository, everything otherwise; never the folders in :data:`SKIP_DIRS`), and copying them
with their symlinks kept."""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterable
from pathlib import Path

from .git_view import own_git_dir, run_git
from .secret_files import is_secret

__all__ = ["SKIP_DIRS", "copy_tree", "copyable", "visible_files"]

#: Directory names never copied into a workspace nor listed, diffed or patched: VCS data,
#: environments and caches that are large, machine-specific and rebuilt on demand.
SKIP_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".portside",
        "__pycache__",
        ".venv",
        "venv",
        ".tox",
        ".nox",
        "node_modules",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".ipynb_checkpoints",
        "wandb",
        "mlruns",
        "lightning_logs",
    }
)


def _skipped(parts: Iterable[str], exclude: frozenset[str]) -> bool:
    return any(p in SKIP_DIRS or p in exclude for p in parts)


def copyable(project: Path, use_git: bool, exclude: frozenset[str], secrets: bool
             ) -> tuple[list[str], list[str]]:
    """(files to copy, secret-looking files withheld)."""
    files = visible_files(project, use_git, exclude)
    if secrets:
        return files, []
    withheld = [f for f in files if is_secret(f)]
    return [f for f in files if not is_secret(f)], withheld


def visible_files(tree: Path, use_git: bool, exclude: frozenset[str],
                  repo: Path | None = None) -> list[str]:
    """Relative POSIX paths of the regular files and symlinks a user would call "the
    project": for git, tracked plus untracked-but-not-ignored; otherwise everything.
    ``repo``: the workspace's tree, whose .git a run could have written (:func:`own_git_dir`)."""
    found: list[str] = []
    if use_git:
        own = own_git_dir(repo) if repo is not None else []
        proc = run_git(tree, *own, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
        names = sorted({n for n in proc.stdout.decode("utf-8", "surrogateescape").split("\0") if n})
        for name in names:
            if _skipped(name.split("/"), exclude):
                continue
            try:
                st = os.lstat(tree / name)
            except OSError:
                continue  # tracked but deleted
            if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
                found.append(name)
        return found
    for dirpath, dirs, files in os.walk(tree):
        rel_dir = os.path.relpath(dirpath, tree)
        prefix = "" if rel_dir == "." else rel_dir.replace(os.sep, "/") + "/"
        keep = []
        for d in sorted(dirs):
            if d in SKIP_DIRS or d in exclude:
                continue
            if os.path.islink(os.path.join(dirpath, d)):
                found.append(prefix + d)  # a symlink to a directory is an entry, not walked
            else:
                keep.append(d)
        dirs[:] = keep
        for f in sorted(files):
            if f in exclude:
                continue
            try:
                st = os.lstat(os.path.join(dirpath, f))
            except OSError:
                continue  # removed while walking
            if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
                found.append(prefix + f)
    return sorted(found)


def _link_target(src_root: Path, src: Path) -> str:
    """A symlink's target for the copy: relative links that leave the project are made
    absolute, so they still point where they pointed for the user."""
    target = os.readlink(src)
    if os.path.isabs(target):
        return target
    resolved = os.path.normpath(os.path.join(os.path.dirname(src), target))
    if os.path.commonpath([str(src_root), resolved]) != str(src_root):
        return resolved
    return target


def _copy_entry(src_root: Path, dst_root: Path, rel: str) -> None:
    src, dst = src_root / rel, dst_root / rel
    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.is_symlink() or dst.is_file():
        dst.unlink()
    if src.is_symlink():
        os.symlink(_link_target(src_root, src), dst)
    else:
        shutil.copy2(src, dst, follow_symlinks=False)


def copy_tree(src: Path, dst: Path, files: Iterable[str]) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for rel in files:
        _copy_entry(src, dst, rel)
