"""The session summary states speed and cost once (issue 41 item 6): the steady-state sentence
(compile apart), never beside a whole-run "N× faster, M% cheaper" line that contradicted it."""

from __future__ import annotations

import sys
from pathlib import Path

from cli_run import cli

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "fixtures" / "trainers" / "train_tiny.py"
CMD = f"{sys.executable} {TINY} --steps 40"


def test_summary_has_one_speed_and_cost_statement(tmp_path: Path) -> None:
    res = cli("verify", "--reference", CMD, "--candidate", CMD, "--target", "cpu",
              "--reference-runs", "2", "--cwd", str(tmp_path), db=tmp_path / "v.db",
              env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "COLUMNS": "200"})
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    lines = res.stdout.splitlines()
    speed = [x for x in lines if "faster" in x or "slower" in x or "throughput" in x
             or "steady speed" in x]
    assert len(speed) == 1 and speed[0].startswith("performance: "), speed
    assert not any(x.startswith("candidate vs reference") for x in lines), lines
    assert "preparation first" in speed[0]  # compilation said apart from the steady state
