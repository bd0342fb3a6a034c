"""`portside study run` killed (-9) mid-study, then run again: nothing is lost or counted twice.

The head dies while a candidate runs; its worker sees its stdin close and stops its run. The
second `study run` does not run the finished task again, continues the open one from its log
(the reference not run again, the cut-off candidate finished ``engine-killed``, not an
attempt) and the database ends with gap-free seqs and the outcome each port must get.
Slow (torch runs on a shared machine, ~1 min idle): the head's death is the case to show.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from cli_run import cli, cli_popen

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "sessions" / "study" / "tiny"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    env["OMP_NUM_THREADS"] = "1"
    return env


def _rows(db: Path, sql: str) -> list[tuple]:
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)
        try:
            return conn.execute(sql).fetchall()
        finally:
            conn.close()
    except sqlite3.Error:
        return []


def test_killed_study_run_resumes(tmp_path: Path) -> None:
    study = tmp_path / "study.toml"
    study.write_text(f"""\
[study]
name = "resume"
[defaults]
path = "{TINY}"
reference = "python train.py --steps 30"
target = "cpu"
reference_runs = 1
[[project]]
name = "first"
candidate = "python train.py --steps 30"
[[project]]
name = "second"
# sleeps in its first life only (the marker file), so the kill lands mid-run
candidate = "test -e {tmp_path}/slept || (touch {tmp_path}/slept; sleep 600); python train.py --steps 30 --max-norm 0.05"
""")
    db = tmp_path / "s.db"
    run = ("study", "run", str(study), "--parallel", "1")
    head = cli_popen(*run, db=db, env=_env(), stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    while not (tmp_path / "slept").exists():
        assert head.poll() is None and time.monotonic() < deadline
        time.sleep(0.3)
    workers = [p for p in psutil.Process(head.pid).children(recursive=True)
               if "portside.core.study.worker" in " ".join(p.cmdline())]
    assert workers
    head.send_signal(signal.SIGKILL)
    head.wait()
    for w in workers:  # the worker stops its run and exits on its own (stdin closed)
        w.wait(timeout=60)
    assert not [p for p in psutil.process_iter(["cmdline"])
                if "sleep 600" in " ".join(p.info["cmdline"] or [])
                and str(tmp_path) in " ".join(p.info["cmdline"] or [])]
    before = _rows(db, "SELECT session_id, COUNT(*) FROM events GROUP BY session_id")
    assert len(before) == 2

    again = cli(*run, db=db, env=_env(), timeout=900)
    assert again.returncode == 0, again.stderr
    assert "first: done earlier: not run again" in again.stderr
    assert _rows(db, "PRAGMA integrity_check")[0][0] == "ok"
    seqs: dict[str, list[int]] = {}
    for sid, seq in _rows(db, "SELECT session_id, seq FROM events ORDER BY session_id, seq"):
        seqs.setdefault(sid, []).append(seq)
    assert all(v == list(range(1, len(v) + 1)) for v in seqs.values())
    finished = [json.loads(b) for (b,) in _rows(db, "SELECT body FROM events WHERE kind = "
                                                "'run.finished'")]
    assert sum(1 for f in finished if f["reason"] == "engine-killed") == 1
    assert len(finished) == 5  # 2 references (neither run twice), 2 candidates, 1 cut off
    report = json.loads(cli("study", "report", str(study), "--format", "json", db=db,
                            env=_env()).stdout)
    got = {r["task"]: (r["outcome"], r["attempts"]) for r in report["tasks"]}
    assert got == {"first": ("passed", 1), "second": ("failed-silent", 1)}
