"""One digest of a project's tree as a run of it reads it: the part of a reference's key
(core/session/reference_reuse.py) that says "the same project".

Git-aware, as the user's idea of "the project" is: in a git repository the tracked files plus
the untracked ones git does not ignore; otherwise every file. Both leave out the folders no
copy of the project takes (SKIP_DIRS: .git, virtual environments, caches). Ignored files
(downloaded data, a run's checkpoints) are not part of it: a run that writes its outputs into
the project would otherwise change the key it is found by.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from .git_view import git_repo
from .tree_listing import visible_files

__all__ = ["BIG_FILE_BYTES", "tree_digest"]

# Larger files (datasets, checkpoints someone committed) are taken by size and mtime, not
# read: a key is computed at every verify, and a changed one only means a fresh run.
BIG_FILE_BYTES = 64 << 20
_CHUNK = 1 << 20


def _file_digest(path: str) -> str:
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _held_here() -> set[tuple[int, int]]:
    """(device, inode) of every file this process holds open. Reading one and closing it would
    drop the POSIX locks the process holds on it: a portside database (and its -wal and -shm)
    inside the project lost its locks to the tree hash, and the next reader's close deleted
    its WAL under the writer. Such files are portside's own, not the project's: left out."""
    held: set[tuple[int, int]] = set()
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return held
    for fd in fds:
        try:
            st = os.stat(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        held.add((st.st_dev, st.st_ino))
    return held


def tree_digest(root: Path) -> str:
    """sha256 over each file's relative path, kind, executable bit and content (a symlink by
    its target; a file over BIG_FILE_BYTES by size and mtime). Raises OSError where the tree
    cannot be listed."""
    root = Path(os.path.realpath(root))
    use_git = git_repo(root) is not None
    h = hashlib.sha256(b"portside tree v1\0" + (b"git" if use_git else b"all") + b"\0")
    held = _held_here()
    for rel in visible_files(root, use_git, frozenset()):
        path = os.path.join(root, rel)
        try:
            st = os.lstat(path)
        except OSError:
            continue  # gone since it was listed
        if (st.st_dev, st.st_ino) in held:
            continue
        if stat.S_ISLNK(st.st_mode):
            what = "l" + hashlib.sha256(os.readlink(path).encode("utf-8", "surrogateescape")
                                        ).hexdigest()
        elif not stat.S_ISREG(st.st_mode):
            what = f"k{stat.S_IFMT(st.st_mode):o}"  # a FIFO, socket or device: by kind, unread
        elif st.st_size > BIG_FILE_BYTES:
            what = f"b{st.st_size}:{st.st_mtime_ns}:{st.st_mode & 0o111:o}"
        else:
            what = f"f{st.st_mode & 0o111:o}:{_file_digest(path)}"
        # One line a file, the path last: no path or content can pass for another's.
        h.update(what.encode() + b" " + rel.encode("utf-8", "surrogateescape") + b"\0")
    return h.hexdigest()
