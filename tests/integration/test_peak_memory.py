"""Peak memory per run (the probe's exit record, core/checks/memory.py) through the real
`portside verify --json`: a candidate holding a 400 MiB ballast tensor against a reference
without one, and the criteria limit that judges it."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from cli_run import clean_env, cli

TRAINER = Path(__file__).resolve().parents[1] / "fixtures" / "trainers" / "train_ballast.py"
PY = sys.executable
MIB = 2**20


# Two real torch trainings through verify (about 5 s of CPU; over 100 s wall on the shared
# machine it was written on).
@pytest.mark.slow
def test_peak_memory_in_the_summary_and_its_limit(tmp_path: Path) -> None:
    (tmp_path / "criteria.toml").write_text(
        "[performance]\nmax_memory_fraction = 0.000001\n")  # any real run is over it
    env = clean_env(threads=1)
    res = cli("verify", "--reference", f"{PY} {TRAINER}",
              "--candidate", f"{PY} {TRAINER} --ballast-mb 400", "--target", "cpu",
              "--reference-runs", "1", "--timeout", "120",
              "--criteria", str(tmp_path / "criteria.toml"), "--json",
              db=tmp_path / "p.db", cwd=tmp_path, env=env)
    out = json.loads(res.stdout)
    ref, cand = out["reference"][0]["memory"], out["candidate"]["memory"]
    assert (ref["where"], cand["where"]) == ("host", "host")
    # the ballast is resident for the whole run: the candidate's peak holds it on top of
    # what the same script uses without it (ground truth: the script's own allocation)
    assert cand["peak_bytes"] - ref["peak_bytes"] >= 390 * MIB, (ref, cand)
    assert cand["peak_bytes"] - ref["peak_bytes"] <= 480 * MIB, (ref, cand)
    assert cand["limit_bytes"] == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    (alarm,) = [a for a in out["alarms"] if a["kind"] == "memory-peak"]
    assert alarm["evidence"]["peak_bytes"] == cand["peak_bytes"]
    assert alarm["evidence"]["limit"] == 0.000001
