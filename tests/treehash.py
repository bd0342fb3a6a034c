"""One tree hash for the tests that prove a tree was not written (the user's project, its .git,
a home directory): every entry's path, type, mode and content, symlinks by target."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path


def tree_hash(root: Path, skip_git_worktrees: bool = False) -> str:
    """sha256 over every entry's path, type, mode and content (symlinks by target)."""
    h = hashlib.sha256()
    for dirpath, dirs, files in os.walk(root):
        dirs.sort()
        rel_dir = os.path.relpath(dirpath, root)
        if skip_git_worktrees and rel_dir == ".git":
            dirs[:] = [d for d in dirs if d != "worktrees"]
        for name in sorted(dirs + files):
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            h.update(f"{os.path.relpath(p, root)}\0{st.st_mode:o}\0".encode())
            if stat.S_ISLNK(st.st_mode):
                h.update(os.readlink(p).encode())
            elif stat.S_ISREG(st.st_mode):
                h.update(Path(p).read_bytes())
    return h.hexdigest()
