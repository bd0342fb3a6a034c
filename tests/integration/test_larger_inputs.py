"""[larger] in the criteria through the real `portside verify --json`: after the candidate
passes at batch 8, its command runs again at batch 64 for 3 steps (the probe ends it), shown as
its own run and judged for peak memory. The trainer holds 8 MiB per sample for the whole run,
so the larger run's peak is ~448 MiB over the candidate's (ground truth: the script's own
allocation), and the memory limit is set between the two."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from pathlib import Path

import pytest
from cli_run import clean_env, cli

TRAINER = Path(__file__).resolve().parents[1] / "fixtures" / "trainers" / "train_batch.py"
PY = sys.executable
MIB = 2**20
RAM = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


# Heavy: three real torch trainings through verify (a reference, the candidate, the larger
# run) and a report export: 22 s of CPU, 75 s wall at load 7.7 on 2 cores; past the 15 s bound.
@pytest.mark.heavy
def test_larger_run_is_its_own_run_judged_for_memory(tmp_path: Path) -> None:
    base = f"{PY} {TRAINER} --steps 12 --hold-mb-per-sample 8"
    # torch on the CPU sits at ~300 MiB; batch 8 holds 64 MiB more, batch 64 holds 512 MiB
    limit = 700 * MIB / RAM
    (tmp_path / "criteria.toml").write_text(
        f"[performance]\nmax_memory_fraction = {limit!r}\n"
        f"[larger]\ncommand = \"{base} --batch {{batch}}\"\nbatch = 64\nsteps = 3\n")
    env = clean_env(threads=1)
    db = tmp_path / "p.db"
    res = cli("verify", "--reference", f"{base} --batch 8", "--candidate", f"{base} --batch 8",
              "--target", "cpu", "--reference-runs", "1", "--timeout", "240",
              "--criteria", str(tmp_path / "criteria.toml"), "--json",
              db=db, cwd=tmp_path, env=env, timeout=600)
    out = json.loads(res.stdout)
    cand = out["candidate"]
    (big,) = out["larger"]
    assert cand["outcome"] == "passed" and cand["steps"] == 12, cand
    # its own run, after the candidate's attempt 1; 3 steps, then the probe ended it cleanly
    assert (big["role"], big["attempt"], big["exit_code"]) == ("larger", 1, 0), big
    assert big["steps"] == 3
    # the held memory is resident: the difference is the 56 extra samples' 8 MiB each
    grew = big["memory"]["peak_bytes"] - cand["memory"]["peak_bytes"]
    assert 430 * MIB <= grew <= 560 * MIB, (cand["memory"], big["memory"])
    # judged: over the limit at batch 64, under it at batch 8
    assert not [a for a in out["alarms"] if a["kind"] == "memory-peak"], \
        "the candidate itself is under the limit"
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT json_extract(body, '$.check'), json_extract(body, '$.run_id'),"
            " json_extract(body, '$.title'), json_extract(body, '$.evidence') FROM events"
            " WHERE kind = 'alarm.raised'").fetchall()
        started = conn.execute(
            "SELECT json_extract(body, '$.role'), json_extract(body, '$.command'),"
            " json_extract(body, '$.run_id') FROM events WHERE kind = 'run.started'"
            " ORDER BY seq").fetchall()
        lines = [ln for (body,) in conn.execute(
            "SELECT body FROM events WHERE kind = 'run.output' AND"
            " json_extract(body, '$.run_id') = ?", (big["run"],))
            for ln in json.loads(body)["lines"]]
    assert [r for r, _, _ in started] == ["reference", "candidate", "larger"]
    assert started[2][1].endswith("--batch 64") and started[2][2] == big["run"]
    # the script saw the bigger batch, and never reached its own end
    assert any("batch=64" in ln for ln in lines) and not any(ln.startswith("done") for ln in lines)
    memory = [(run, title, json.loads(evid)) for check, run, title, evid in rows
              if check == "memory-peak"]
    assert [run for run, _, _ in memory] == [big["run"]], memory
    assert memory[0][1].startswith("at batch=64: peak host memory")
    assert memory[0][2]["larger"] == {"batch": 64}
    assert [a["kind"] for a in big["alarms"]] == ["memory-peak"]
    # a warning: the verdict stands on the candidate
    assert out["verdict"] == "pass" and res.returncode == 0, res.stderr[-2000:]
    # one line from the log's fold, in verify --json and the report alike
    (fold,) = out["cost"]["larger"]
    assert fold["run"] == big["run"] and fold["candidate_run"] == cand["run"]
    assert fold["line"].startswith("at batch=64: passed after 3 step(s); peak host memory ")
    report = cli("export", "last", "--what", "report", db=db, env=env, timeout=120).stdout
    section = report.split("## Larger inputs", 1)[1].split("\n## ", 1)[0]
    assert f"- {big['run']} (after attempt 1, {cand['run']}): {fold['line']}" in section
    assert f"| {big['run']} | larger | 1 |" in report  # the runs table has its role
