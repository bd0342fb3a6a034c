"""One file as a baseline keeps it: its kind, content hash and git mode (or a symlink's target),
and whether two such entries are the same file."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Any

__all__ = ["BLOB_LIMIT", "file_entry", "same_entry"]

#: Baseline files up to this size keep their contents (for diffs); larger ones only a hash.
BLOB_LIMIT = 4 * 1024 * 1024


def _file_sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _git_mode(st_mode: int) -> str:
    return "100755" if st_mode & 0o111 else "100644"


def file_entry(tree: Path, rel: str, known: dict[str, Any] | None = None) -> dict[str, Any] | None:
    path = tree / rel
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return {"kind": "link", "target": os.readlink(path)}
    if not stat.S_ISREG(st.st_mode):
        return None
    # Large files (datasets, checkpoints) are re-hashed only when size or mtime moved.
    if (
        known is not None
        and known.get("kind") == "file"
        and st.st_size > BLOB_LIMIT
        and known.get("size") == st.st_size
        and known.get("mtime_ns") == st.st_mtime_ns
    ):
        sha = known["sha"]
    else:
        sha = _file_sha(path)
    return {
        "kind": "file",
        "sha": sha,
        "mode": _git_mode(st.st_mode),
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
    }


def same_entry(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    if a is None or b is None:
        return a is b
    if a["kind"] != b["kind"]:
        return False
    if a["kind"] == "link":
        return a["target"] == b["target"]
    return a["sha"] == b["sha"] and a["mode"] == b["mode"]
