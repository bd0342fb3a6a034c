"""A run's probe files: PORTSIDE_PROBE_OUT and the per-rank / per-process ones beside it.

The probe opens them in append mode (sequential processes of one run share the rank-0 file,
see FORMAT.md), so whoever starts a run clears what an earlier run left at the same path.
"""

from __future__ import annotations

import os
import re
from pathlib import Path


def run_files(out: str | os.PathLike[str]) -> list[Path]:
    """The files a run with this PORTSIDE_PROBE_OUT writes: out itself, <stem>.rank<R><suffix>
    and <stem>.pid<PID><suffix> (the names _writer.file_for gives them)."""
    path = Path(out)
    root, ext = os.path.splitext(path.name)
    sibling = re.compile(re.escape(root) + r"\.(?:rank|pid)\d+" + re.escape(ext) + r"\Z")
    if not path.parent.is_dir():
        return []
    return sorted(p for p in path.parent.iterdir()
                  if p.name == path.name or sibling.match(p.name))


def clear_run_files(out: str | os.PathLike[str]) -> list[Path]:
    """Remove an earlier run's files at this path, so the next run starts them anew."""
    gone = []
    for p in run_files(out):
        try:
            p.unlink()
            gone.append(p)
        except FileNotFoundError:
            pass
    return gone
