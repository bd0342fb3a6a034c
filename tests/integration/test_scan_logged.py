"""A session logs its project's portability scan once, before any run, and the report shows it:
a real `portside verify` in a copy of a fixture project (its runs are `true`: no torch, the
scan is what is looked at). Ground truth: the fixture's hand-checked EXPECTED list."""

from __future__ import annotations

import json
import os
import resource
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from cli_run import cli

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "scan"
PROJECT = "time_sequence_prediction"


def test_the_scan_is_logged_before_the_runs_and_reported(tmp_path: Path) -> None:
    project = tmp_path / PROJECT
    shutil.copytree(FIXTURES / PROJECT, project)
    db = tmp_path / "p.db"
    res = cli("verify", "--reference", "true", "--candidate", "true", "--target", "cpu",
              "--reference-runs", "1", "--json", db=db, cwd=project)
    assert res.returncode == 1, res.stderr  # `true` trains nothing: the verdict is fail
    assert "scan: 2 file(s) in " in res.stderr and ": 5 float64, 2 recompile" in res.stderr
    with sqlite3.connect(db) as conn:
        kinds = [k for (k,) in conn.execute("SELECT kind FROM events ORDER BY seq")]
        (body,) = conn.execute("SELECT json_extract(body, '$.findings') FROM events"
                               " WHERE kind = 'project.scanned'").fetchone()
    assert kinds.count("project.scanned") == 1
    assert kinds.index("project.scanned") < kinds.index("run.started")
    logged = [f"{f['path']}:{f['line']} {f['kind']}" for f in json.loads(body)]
    want = [" ".join(ln.split()[:2]).removeprefix(PROJECT + "/")
            for ln in (FIXTURES / "EXPECTED").read_text().splitlines()
            if ln.startswith(PROJECT + "/")]
    assert logged == want
    report = cli("export", "last", "--what", "report", db=db).stdout
    section = report.split("## Portability scan", 1)[1].split("\n## ", 1)[0]
    assert "- `float64` 5 · `recompile` 2" in section
    assert ("| `train.py:54` | float64 | `.double()` | float64: TPUs have no native float64"
            in section)
    assert section.count("| `train.py:") == 7
    assert report.index("## Portability scan") < report.index("## Runs")


# --- issue 38.9: a hostile project gives findings, never a hang, a flood or an ended session --

CUDA = "import torch\ny = torch.zeros(1).cuda()\n"  # a trigger word: the file is parsed
ATTACKS = {
    "fifo": lambda p: os.mkfifo(p / "pipe.py"),  # open() waited for a writer forever
    "zero": lambda p: (p / "zero.py").symlink_to("/dev/zero"),  # read without end: 9 GB in 15 s
    "minus": lambda p: (p / "minus.py").write_text(CUDA + "x = " + "-" * 200_000 + "1\n"),
    "plus": lambda p: (p / "plus.py").write_text(CUDA + "x = " + "+".join(["1"] * 100_000)),
}


def _hostile(where: Path, attacks: list[str]) -> Path:
    where.mkdir()
    (where / "train.py").write_text(CUDA)
    for name in attacks:
        ATTACKS[name](where)
    return where


def _portside(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """The CLI in a process of its own, its memory capped (a regression reading /dev/zero
    ends in MemoryError here, not on the CI machine) and its time bounded."""
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
    return cli(*args, cwd=cwd, timeout=30, preexec_fn=cap)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("attack", list(ATTACKS))
def test_scan_of_a_hostile_file_is_an_unparsed_finding(tmp_path: Path, attack: str) -> None:
    project = _hostile(tmp_path / "p", [attack])
    res = _portside(["scan", "--json", "."], project)
    assert res.returncode == 1, res.stderr[-2000:]  # findings, not a traceback
    found = {f["path"]: f for f in json.loads(res.stdout)["findings"]}
    (bad,) = [f for path, f in found.items() if path != "train.py"]
    assert bad["kind"] == "unparsed", bad
    assert found["train.py"]["kind"] == "cuda-call"  # the rest of the project still scanned


@pytest.mark.timeout(60)
def test_a_session_on_a_hostile_project_logs_its_scan_and_goes_on(tmp_path: Path) -> None:
    # Before: the scan hung (FIFO) or raised (deep nesting) and the session ended "engine
    # failed" before its first run.
    project = _hostile(tmp_path / "p", list(ATTACKS))
    db = tmp_path / "p.db"
    res = _portside(["--db", str(db), "verify", "--reference", "true", "--candidate", "true",
                     "--target", "cpu", "--reference-runs", "1", "--json"], project)
    assert res.returncode == 1, res.stderr[-2000:]  # `true` trains nothing: verdict fail
    assert "engine" not in res.stderr and "Traceback" not in res.stderr, res.stderr[-2000:]
    with sqlite3.connect(db) as conn:
        kinds = [k for (k,) in conn.execute("SELECT kind FROM events ORDER BY seq")]
        (body,) = conn.execute("SELECT json_extract(body, '$.findings') FROM events"
                               " WHERE kind = 'project.scanned'").fetchone()
    assert kinds.index("project.scanned") < kinds.index("run.started") and kinds[-1] == "session.ended"
    unparsed = {f["path"] for f in json.loads(body) if f["kind"] == "unparsed"}
    assert unparsed == {"pipe.py", "zero.py", "minus.py", "plus.py"}, body
