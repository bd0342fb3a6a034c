"""An agent task in a study: a scripted agent edits its own copy of the project and asks for
a candidate run; the study runs it as one phase (`--policy auto`: edits decided by policy,
the runs in the sandbox), its events through the one writer. The project folder itself is
never written. Slow (two torch runs on a shared machine)."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import sys
from pathlib import Path

import pytest
from cli_run import cli

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "sessions" / "study" / "tiny"


def test_scripted_agent_task(tmp_path: Path) -> None:
    old = 'p.add_argument("--log-every", type=int, default=1)'
    assert old in (TINY / "train.py").read_text()
    script = tmp_path / "agent.jsonl"
    script.write_text("\n".join(json.dumps(x) for x in [
        {"say": "Logging every 5th step; the numerics stay."},
        {"edit": {"path": "train.py", "old": old, "new": old.replace("default=1", "default=5")}},
        {"run": "candidate"},
        {"claim": "ported: only the logging changed"},
    ]) + "\n")
    study = tmp_path / "study.toml"
    study.write_text(f"""\
[study]
name = "agents"
[[project]]
name = "tiny"
path = "{TINY}"
reference = "python train.py --steps 30"
agent = "scripted:{script}"
target = "cpu"
reference_runs = 1
""")
    before = hashlib.sha256((TINY / "train.py").read_bytes()).hexdigest()
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "OMP_NUM_THREADS": "1"}
    db = tmp_path / "s.db"
    out = cli("study", "run", str(study), db=db, env=env, timeout=900)
    assert out.returncode == 0, out.stderr
    assert hashlib.sha256((TINY / "train.py").read_bytes()).hexdigest() == before
    conn = sqlite3.connect(db)
    kinds = [k for (k,) in conn.execute("SELECT kind FROM events ORDER BY seq")]
    placed = [json.loads(b)["detail"] for (b,) in conn.execute(
        "SELECT body FROM events WHERE kind = 'session.state'")
        if json.loads(b)["state"] == "study-placed"]
    conn.close()
    assert placed and placed[0].startswith("all phase on ")
    assert kinds.count("edit.applied") == 1 and kinds.count("agent.claimed") == 1
    report = json.loads(cli("study", "report", str(study), "--format", "json", db=db,
                            env=env).stdout)
    (row,) = report["tasks"]
    assert (row["outcome"], row["verdict"], row["attempts"]) == ("passed", "pass", 1)
