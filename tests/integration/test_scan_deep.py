"""Issue 38.9, a session on a project nested deeper than Python recurses: 3.11's os.walk raised
RecursionError out of the scan and the session ended "engine failed" before its first run. A
real `portside verify` (runs are `true`), its time bounded."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from pathlib import Path

import pytest
from cli_run import cli

DEPTH = 1500  # folders nested deeper than Python's recursion limit


def _rmdirs(top: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(top.joinpath(*["a"] * DEPTH, "deep.py"))
    for depth in range(DEPTH, 0, -1):  # bottom-up: rmtree (and pytest's cleanup) recurse too
        with contextlib.suppress(FileNotFoundError):
            os.rmdir(top.joinpath(*["a"] * depth))


@pytest.mark.timeout(120)
def test_a_session_on_deeply_nested_folders_scans_them_and_goes_on(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "train.py").write_text("import torch\nx = torch.zeros(1).cuda()\n")
    fd = os.open(project, os.O_RDONLY)
    try:
        for _ in range(DEPTH):
            os.mkdir("a", dir_fd=fd)
            fd, old = os.open("a", os.O_RDONLY, dir_fd=fd), fd
            os.close(old)
        with open(os.open("deep.py", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as fh:
            fh.write("import torch\ny = torch.zeros(1).cuda()\n")
        os.close(fd)
        db = tmp_path / "p.db"
        res = cli("verify", "--reference", "true", "--candidate", "true", "--target", "cpu",
                  "--reference-runs", "1", db=db, cwd=project, timeout=90)
        assert "engine failed" not in res.stdout + res.stderr, res.stdout[-2000:]
        with sqlite3.connect(db) as conn:
            (body,) = conn.execute("SELECT json_extract(body, '$.findings') FROM events"
                                   " WHERE kind = 'project.scanned'").fetchone()
            (reason,) = conn.execute("SELECT json_extract(body, '$.reason') FROM events"
                                     " WHERE kind = 'session.ended'").fetchone()
        assert "engine failed" not in str(reason), reason
        got = sorted((f["path"].count("/"), f["kind"]) for f in json.loads(body))
        assert got == [(0, "cuda-call"), (DEPTH, "cuda-call")], got  # the deepest file too
    finally:
        _rmdirs(project)
