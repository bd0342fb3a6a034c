"""Acceptance, measured (issue 26): how often correct ports are failed (false error rate) and
how often small real changes are caught (detection), before and after issue 26, side by side
from the same runs.

Through the real path (probe, runner, Verifier, checks): three references of
acceptance_trainer.py (seed offsets 0, 1, 2), then >= 20 correct ports (other seeds, some with
drop_last) and small changes over several seeds: 20% label noise (a data bug no setting
shows), weight decay 1e-3, momentum 0.8. "before": the error kinds the checks raised without
the settings checks, with the old goal rule (worse than the tolerance and the references'
spread) and the fixed drift envelope (`drift_alpha = 0`); "after": the checks as they are
(settings facts, goal t-test at alpha 0.05, drift band calibrated to drift_alpha 0.05 over the
run).
`--xla` adds a correct torch_xla port (XLA:CPU, the torch_xla venv) to the correct runs.

Usage: python -m tests.bench.bench_acceptance [--correct 20] [--changed 6] [--parallel 2] [--xla]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

from portside.core.checks.drift import check_drift
from portside.core.checks.goal import check_goal
from portside.core.log.bus import EventBus
from portside.core.log.criteria import parse_criteria
from portside.core.session.verify import RunReport, Verifier
from tests.doubles import MemorySink

HERE = Path(__file__).resolve().parent

XLA_PYTHON = Path(os.environ.get("PORTSIDE_XLA_PYTHON")
                  or Path.home() / ".cache" / "portside" / "xla-venv" / "bin" / "python")
CRITERIA = """
[goal]
metric = "accuracy"
pattern = 'accuracy (?P<value>[0-9.]+)'
direction = "max"
tolerance = 0.01
[acceptance]
alpha = 0.05
"""
NEW_KINDS = {"optimizer-changed", "data-changed", "precision-changed"}
FIXED_DRIFT = CRITERIA + "drift_alpha = 0\n"
CHANGES = {"label noise 2%": "--label-noise 0.02", "label noise 5%": "--label-noise 0.05", "label noise 20%": "--label-noise 0.2",
           "weight decay 1e-3": "--weight-decay 1e-3", "momentum 0.8": "--momentum 0.8"}


def before_errors(rep: RunReport, refs: list[RunReport], crit) -> set[str]:  # noqa: ANN001
    """What the checks before issue 26 raised on these records: no settings checks, the old
    goal rule, the fixed drift envelope."""
    kinds = {a.kind for a in rep.alarms if a.is_error} - NEW_KINDS - {"goal-regression",
                                                                      "numeric-drift"}
    ref_recs = [r.records for r in refs]
    if check_goal(ref_recs, rep.records, crit):
        kinds.add("goal-regression")
    if check_drift(ref_recs, rep.records, parse_criteria(FIXED_DRIFT, "fixed drift")):
        kinds.add("numeric-drift")
    return kinds


async def main(args: argparse.Namespace) -> None:
    crit = parse_criteria(CRITERIA, "bench_acceptance")
    py = sys.executable
    with tempfile.TemporaryDirectory(prefix="portside-acceptance-") as tmp:
        v = Verifier(EventBus(MemorySink()), "bench-acceptance", crit, "cpu", Path(tmp),
                     timeout_s=900, stall_s=300)
        refs = [await v.run_reference(f"{py} acceptance_trainer.py", HERE) for _ in range(3)]
        jobs: list[tuple[str, str, str]] = []  # (group, flags, launcher)
        for k in range(args.correct):
            flags = f"--seed {100 + k}" + (" --drop-last" if k % 4 == 3 else "")
            jobs.append(("correct", flags, py))
        if args.xla and XLA_PYTHON.exists():
            jobs.append(("correct", "--seed 200", f"PJRT_DEVICE=CPU {XLA_PYTHON}"))
        for label, flags in CHANGES.items():
            jobs += [(label, f"--seed {300 + k} {flags}", py) for k in range(args.changed)]

        # One Verifier per lane (a Verifier runs one candidate at a time), the same references.
        lanes = []
        for i in range(max(args.parallel, 1)):
            lane = Verifier(EventBus(MemorySink()), f"bench-acceptance-{i}", crit, "cpu",
                            Path(tmp) / f"lane{i}", timeout_s=900, stall_s=300)
            lane.references = list(refs)
            lanes.append(lane)
        queue = list(jobs)
        results: list[tuple[str, RunReport]] = []

        async def work(lane: Verifier) -> None:
            while queue:
                group, flags, launcher = queue.pop(0)
                rep = await lane.run_candidate(f"{launcher} acceptance_trainer.py {flags}", HERE)
                results.append((group, rep))
                if group == "correct":  # a correct port failed: which, and by what
                    for a in rep.alarms:
                        if a.is_error:
                            print(f"correct port failed: {launcher.split()[-1]} {flags}: "
                                  f"{a.kind}: {a.title}", flush=True)

        t0 = time.perf_counter()
        await asyncio.gather(*(work(lane) for lane in lanes))
        wall = time.perf_counter() - t0
    rows: dict[str, list[tuple[set[str], set[str]]]] = {}
    for group, rep in results:
        after = {a.kind for a in rep.alarms if a.is_error}
        rows.setdefault(group, []).append((before_errors(rep, refs, crit), after))
    ref_acc = [r.records.last_metric("accuracy") for r in refs]
    print(f"references: accuracy {ref_acc}; {len(results)} candidate runs in {wall:.0f} s")
    print(f"{'group':<18} {'runs':>4} {'failed: before':>15} {'after':>6} "
          f"{'goal alarm: before':>19} {'after':>6} {'drift alarm: before':>20} {'after':>6}"
          "  after kinds")
    for group, got in rows.items():
        n = len(got)
        b, a = (sum(bool(x[i]) for x in got) for i in (0, 1))
        gb, ga = (sum("goal-regression" in x[i] for x in got) for i in (0, 1))
        db, da = (sum("numeric-drift" in x[i] for x in got) for i in (0, 1))
        kinds = sorted({k for x in got for k in x[1]})
        print(f"{group:<18} {n:>4} {b:>11}/{n:<3} {a:>3}/{n:<3} {gb:>15}/{n:<3} {ga:>3}/{n:<3}"
              f" {db:>16}/{n:<3} {da:>3}/{n:<3}  {', '.join(kinds) or '-'}")
    correct = rows.get("correct", [])
    fa_b = sum(bool(x[0]) for x in correct) / max(len(correct), 1)
    fa_a = sum(bool(x[1]) for x in correct) / max(len(correct), 1)
    print(f"TARGET false error rate over {len(correct)} correct ports <= alpha 0.05 "
          f"(+ binomial slack): before {fa_b:.2f}, after {fa_a:.2f}")
    dfa_b, dfa_a = (sum("numeric-drift" in x[i] for x in correct) / max(len(correct), 1)
                    for i in (0, 1))
    print(f"TARGET drift false-alarm rate over {len(correct)} correct ports <= drift_alpha 0.05 "
          f"(+ binomial slack): before {dfa_b:.2f}, after {dfa_a:.2f}")
    for label in CHANGES:
        got = rows.get(label, [])
        db = sum(bool(x[0]) for x in got) / max(len(got), 1)
        da = sum(bool(x[1]) for x in got) / max(len(got), 1)
        print(f"TARGET detection of {label} (>= before): before {db:.2f}, after {da:.2f}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--correct", type=int, default=20)
    ap.add_argument("--changed", type=int, default=6)
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--xla", action="store_true")
    asyncio.run(main(ap.parse_args()))
