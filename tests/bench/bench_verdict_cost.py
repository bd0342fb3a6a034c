"""The cost of a verdict (issue 40.1): an iteration as the study's, references reused.

    .venv/bin/python -m tests.bench.bench_verdict_cost [--steps 40]

One project, 7 candidate attempts in a row (5 wrong in different ways, 2 correct), each a real
`portside verify` with 2 references, on one database; once as today (`--fresh-references`:
every verify runs its references) and once as now (the references run once, then reused).
Real runs of tests/fixtures/trainers/train_tiny.py (torch, CPU).

CPU-seconds of runs: each run's command ends with the shell's `times` (its children's user +
system CPU: what wait4 reported for the run's processes), written to a file outside the
project. The whole `verify` processes' CPU (portside's own work too: the key, the store, the
checks) is printed beside it, from wait4's rusage of each verify (RUSAGE_CHILDREN here).
Target: runs' CPU-seconds <= 0.45x today's ((2 + 7) / (3 x 7) = 0.43 is the limit); verdicts
and alarm kinds identical attempt by attempt.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.cli_run import cli

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "fixtures" / "trainers" / "train_tiny.py"
PY = sys.executable
ATTEMPTS = [  # (what, candidate flags): 5 wrong in different ways, then 2 correct
    ("max_norm changed", "--max-norm 0.05"),
    ("no LR schedule", "--no-scheduler"),
    ("diverges", "--lr 1e6"),
    ("crashes", "--raise-at 5"),
    ("batch size changed", "--batch-size 32"),
    ("correct, another seed", "--seed 7"),
    ("correct, another seed", "--seed 3"),
]


def _timed(command: str, cpu_log: Path) -> str:
    """The command, then its processes' CPU appended to cpu_log (also when portside stops it
    with SIGTERM: a candidate ended at its decisive alarm); its own exit status kept. `times`
    is the shell's builtin, not in a pipeline (a subshell would count its own children)."""
    return (f"trap 'times >> {cpu_log}; exit 143' TERM; {command}; rc=$?; "
            f"times >> {cpu_log}; exit $rc")


def _cpu(log: Path) -> list[float]:
    """Each `times` report's second line, the children's '0m12.340s 0m1.200s': user +
    system seconds of the run's processes."""
    lines = log.read_text().splitlines() if log.exists() else []
    out = []
    for line in lines[1::2]:
        total = 0.0
        for part in line.split():
            m, _, sec = part.rstrip("s").partition("m")
            total += float(m) * 60 + float(sec)
        out.append(total)
    return out


def iteration(tmp: Path, name: str, steps: int, fresh: bool) -> dict[str, Any]:
    project = tmp / name / "project"
    project.mkdir(parents=True)
    shutil.copy(TINY, project / "train_tiny.py")
    db, ref_cpu, cand_cpu = tmp / name / "p.db", tmp / name / "ref.cpu", tmp / name / "cand.cpu"
    base = f"{PY} train_tiny.py --steps {steps}"
    outs: list[dict[str, Any]] = []
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    for _, flags in ATTEMPTS:
        done = cli("verify", "--reference", _timed(base, ref_cpu),
                   "--candidate", _timed(f"{base} {flags}", cand_cpu),
                   "--target", "cpu", "--json", "--timeout", "600",
                   *(["--fresh-references"] if fresh else []),
                   db=db, cwd=project, timeout=1800)
        if done.returncode not in (0, 1):
            raise SystemExit(f"verify failed ({done.returncode}): {done.stderr[-2000:]}")
        outs.append(json.loads(done.stdout))
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    refs, cands = _cpu(ref_cpu), _cpu(cand_cpu)
    return {
        "wall_s": wall,
        "verify_cpu_s": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
        "ref_runs": len(refs), "ref_cpu_s": sum(refs),
        "cand_runs": len(cands), "cand_cpu_s": sum(cands),
        "verdicts": [(o["verdict"], sorted({a["kind"] for a in o["alarms"]
                                            if a["severity"] in ("error", "critical")}))
                     for o in outs],
        "reused": sum(1 for o in outs for r in o["reference"] if r.get("reused_from")),
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        today = iteration(Path(d), "today", args.steps, fresh=True)
        now = iteration(Path(d), "now", args.steps, fresh=False)
    cores = os.cpu_count() or 1
    print(f"verdict cost: 7 attempts x (2 references + 1 candidate) of train_tiny.py --steps "
          f"{args.steps}, each a `portside verify`; {cores} cores, load average "
          f"{os.getloadavg()[0]:.1f}")
    for name, r in (("today (--fresh-references)", today), ("now (references reused)", now)):
        print(f"  {name}: {r['ref_runs']} reference runs {r['ref_cpu_s']:.1f} CPU-s + "
              f"{r['cand_runs']} candidate runs {r['cand_cpu_s']:.1f} CPU-s; "
              f"{r['reused']} references reused; whole verify processes {r['verify_cpu_s']:.1f} "
              f"CPU-s, {r['wall_s']:.0f} s wall")
    for (what, flags), a, b in zip(ATTEMPTS, today["verdicts"], now["verdicts"], strict=True):
        print(f"    {what:<22} {flags:<16} today {a[0]} {','.join(a[1]) or '-'} · now "
              f"{b[0]} {','.join(b[1]) or '-'}")
    runs_today = today["ref_cpu_s"] + today["cand_cpu_s"]
    runs_now = now["ref_cpu_s"] + now["cand_cpu_s"]
    ratio = runs_now / runs_today
    same = today["verdicts"] == now["verdicts"]
    print(f"TARGET CPU-seconds of runs for 7 attempts with 2 references each <= 0.45x today's: "
          f"{runs_now:.1f} vs {runs_today:.1f} CPU-s = {ratio:.2f}x "
          f"({'met' if ratio <= 0.45 else 'not met'}; whole verify processes "
          f"{now['verify_cpu_s'] / today['verify_cpu_s']:.2f}x)")
    print(f"TARGET verdicts identical attempt by attempt: {'met' if same else 'not met'} "
          f"({sum(1 for v, _ in now['verdicts'] if v == 'pass')} pass, "
          f"{sum(1 for v, _ in now['verdicts'] if v != 'pass')} fail)")


if __name__ == "__main__":
    main()
