"""Agent sessions end to end: scripted agent, real workspace, real runs, real SQLite."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from cli_run import cli
from tiny_project import tiny_project
from treehash import tree_hash

from portside.store import Store

PY = sys.executable


def _script(tmp: Path, lines: list[dict]) -> Path:
    path = tmp / "agent.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return path


@pytest.mark.slow  # a whole session with real training runs
def test_clipping_change_claimed_as_success_fails_the_session(tmp_path: Path) -> None:
    project = tiny_project(tmp_path / "tiny-project")
    before = tree_hash(project)
    script = _script(tmp_path, [
        {"say": "Porting train.py; first a look at the loop."},
        {"read": "train.py"},
        {"edit": {"path": "train.py",
                  "old": 'p.add_argument("--max-norm", type=float, default=1.0)',
                  "new": 'p.add_argument("--max-norm", type=float, default=0.05)',
                  "rationale": "clip harder so the first compiled steps stay stable"}},
        {"run": "candidate"},
        {"claim": "Ported; training converges, numerics unchanged."},
    ])
    db = tmp_path / "s.db"
    res = cli("run", str(project), "--target", "cpu", "--agent", f"scripted:{script}",
              "--reference", f"{PY} train.py", "--reference-runs", "2", "--headless",
              "--policy", "auto", "--json", "--stall", "30", db=db, timeout=600,
              env={"PATH": "/usr/bin:/bin", "ANTHROPIC_API_KEY": "sk-ant-must-not-leak",
                   "HOME": str(tmp_path), "OMP_NUM_THREADS": "1"})
    assert res.returncode == 1, res.stderr[-3000:]
    data = json.loads(res.stdout)
    assert data["verdict"] == "fail"
    with Store(db) as store:
        sid = data["session"]
        checks = {a["check"]: a["severity"] for a in store.alarms(sid)}
        assert "clipping-changed" in checks
        assert checks.get("agent-claim-contradicted") == "critical"
        info = store.session(sid)
        assert info["agent"] == f"scripted:{script.name}"
        assert info["verdict"] == "fail"
        kinds = [e.__struct_config__.tag for e in store.events(sid)]
        assert kinds.count("edit.applied") == 1 and "agent.claimed" in kinds
        runs = store.runs(sid)
        assert [r["outcome"] for r in runs if r["role"] == "reference"] == ["passed", "passed"]
        # The API key never reaches the database.
        dump = "\n".join(store.event_bodies(sid))
        assert "sk-ant-must-not-leak" not in dump
    assert tree_hash(project) == before  # the user's tree is never written
