"""`python -m portside.core.probe` starts its output anew for each run (issue 30)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ._util import SCRIPTS, ground_truth, read_records, steps_of


def _cli(out: Path, steps: int, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PORTSIDE_")}
    cmd = [sys.executable, "-m", "portside.core.probe", "--out", str(out), "--",
           str(SCRIPTS / "train_cpu.py"), "--steps", str(steps)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return proc


@pytest.mark.slow  # two real training runs
def test_second_run_starts_the_file_anew(tmp_path: Path) -> None:
    out = tmp_path / "run.jsonl"
    _cli(out, 3, tmp_path)
    # What an earlier multi-rank run at this path left beside it; an unrelated file stays.
    (tmp_path / "run.rank1.jsonl").write_text('{"type": "step"}\n')
    (tmp_path / "run.pid77.jsonl").write_text('{"type": "step"}\n')
    (tmp_path / "run.rankings.jsonl").write_text("keep\n")
    proc = _cli(out, 2, tmp_path)
    recs = read_records(out)
    gt = ground_truth(proc.stdout)  # the script's own print of each step it ran
    assert len(gt) == 2
    assert [r["step"] for r in steps_of(recs)] == [0, 1]
    assert [r["type"] for r in recs].count("exit") == 1
    assert [r["seq"] for r in recs] == list(range(len(recs)))
    assert len({r["pid"] for r in recs}) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.jsonl", "run.rankings.jsonl"]
