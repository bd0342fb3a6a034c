"""A failed run's cause (core/checks/crash_cause.py) through the real CLI: each script in
tests/fixtures/crashes fails one known way on the CPU; `portside verify --json` must put that
cause, and the line that shows it, on the candidate's crash alarm."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from cli_run import clean_env, cli

from portside.core.checks.crash_cause import CAUSES

CRASHES = Path(__file__).resolve().parents[1] / "fixtures" / "crashes"
PY = sys.executable
# A reference that exits at once: the candidate is run and judged all the same, and the test
# pays for one torch import, not two.
REFERENCE = f"{PY} -c \"print('step=1 loss=1.0')\""

# script -> (cause, text the cause line must hold: what the script does, known beforehand)
CASES = {
    "oom_alloc.py": ("out-of-memory", "can't allocate memory"),
    "unsupported_op.py": ("unsupported-op", "Could not run 'aten::"),
    "cuda_only.py": ("cuda-only", "Torch not compiled with CUDA enabled"),
    "missing_lib.py": ("missing-dependency", "No module named 'flash_attn'"),
    "compile_error.py": ("compile-error", "not supported in Torchscript"),
    "rendezvous.py": ("collective-timeout", "waiting for clients"),
    "data_error.py": ("data-error", "in DataLoader worker process"),
    "unknown.py": ("unknown", ""),
}


def test_every_cause_has_a_failing_script() -> None:
    assert sorted(c for c, _ in CASES.values()) == sorted(CAUSES)


@pytest.mark.slow  # portside verify on a real failing script, per cause
@pytest.mark.parametrize("script", sorted(CASES))
def test_the_crash_alarm_names_the_cause(tmp_path: Path, script: str) -> None:
    env = clean_env(threads=1)
    res = cli("verify", "--reference", REFERENCE, "--candidate", f"{PY} {CRASHES / script}",
              "--target", "cpu", "--reference-runs", "1", "--timeout", "120", "--json",
              db=tmp_path / "p.db", cwd=tmp_path, env=env)
    assert res.returncode == 1, res.stderr[-2000:]
    out = json.loads(res.stdout)
    crashed = [a for a in out["alarms"] if a["kind"] == "crashed"]
    assert len(crashed) == 1, out["alarms"]
    cause, shows = CASES[script]
    evidence = crashed[0]["evidence"]
    assert (evidence["cause"], shows in evidence["cause_line"]) == (cause, True), evidence
