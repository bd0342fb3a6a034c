"""A session logs its project's portability scan once, before any run, and the report shows it:
a real `portside verify` in a copy of a fixture project (its runs are `true`: no torch, the
scan is what is looked at). Ground truth: the fixture's hand-checked EXPECTED list."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

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
