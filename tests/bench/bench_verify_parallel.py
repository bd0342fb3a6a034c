"""verify's wall time with 2 references and a candidate: one after another, references at once,
and the candidate beside the references.

    .venv/bin/python -m tests.bench.bench_verify_parallel [--rounds 2] [--steps 200]

Real runs of tests/fixtures/trainers/train_tiny.py (torch, CPU) through the real Verifier,
as `verify` makes them, rounds interleaved. A "today": `[hosts] parallel = 1`, run_references(2)
then run_candidate; B: `parallel = 2, overlap = false`, the references at once, then the
candidate (issue 30's first step); C: `parallel = 3`, the candidate started while the
references run (start_references, then run_candidate: it takes a slot when one is free, here
bounded by the cores). Targets (issue 30): B and C <= 0.75x A on a 4-core machine; on fewer
cores (this shared 2-core one) the figures are what they are, printed with the cores and the
load average.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from portside.core.log.bus import EventBus
from portside.core.log.criteria import parse_criteria
from portside.core.session.verify import Verifier
from tests.doubles import MemorySink

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "fixtures" / "trainers" / "train_tiny.py"

SIDES = {  # name -> criteria, and whether the candidate starts beside the references
    "A": ("[hosts]\nparallel = 1\n", False),
    "B": ("[hosts]\nparallel = 2\noverlap = false\n", False),
    "C": ("[hosts]\nparallel = 3\n", True),
}


def one(tmp: Path, side: str, steps: int, i: int) -> float:
    criteria, beside = SIDES[side]
    v = Verifier(EventBus(MemorySink()), f"bench-{side}-{i}",
                 parse_criteria(criteria, "bench.toml"), "cpu", tmp / f"probe-{side}-{i}",
                 stall_s=120.0, timeout_s=600)
    cmd = f"{sys.executable} {TINY} --steps {steps}"

    async def go() -> None:
        if beside:  # as the engine's verify does when the criteria let it
            started = v.start_references(2, cmd, tmp)
            cand = await v.run_candidate(cmd + " --seed 7", tmp)
            refs = await started
        else:
            refs = await v.run_references(2, cmd, tmp)
            cand = await v.run_candidate(cmd + " --seed 7", tmp)
        assert [r.outcome for r in refs] == ["passed", "passed"], [r.alarms for r in refs]
        assert cand.outcome == "passed", cand.alarms

    t0 = time.perf_counter()
    asyncio.run(go())
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--steps", type=int, default=200)
    args = p.parse_args()
    walls: dict[str, list[float]] = {side: [] for side in SIDES}
    with tempfile.TemporaryDirectory() as d:
        for i in range(args.rounds):
            for side in SIDES:
                walls[side].append(one(Path(d), side, args.steps, i))
    med = {side: statistics.median(w) for side, w in walls.items()}
    cores = os.cpu_count() or 1
    print(f"verify, 2 references + 1 candidate of train_tiny.py --steps {args.steps}; "
          f"{args.rounds} interleaved rounds; {cores} cores, load average "
          f"{os.getloadavg()[0]:.1f}")
    for side, (criteria, beside) in SIDES.items():
        how = criteria.replace("[hosts]\n", "").strip().replace("\n", ", ")
        print(f"  {side} ({how}{', candidate beside' if beside else ''}): "
              f"{', '.join(f'{w:.1f}' for w in walls[side])} s")
    a = med["A"]
    for side, what in (("B", "verify with 2 references at once <= 0.75x one after another"),
                       ("C", "verify with 2 references and a candidate <= 0.75x today's wall "
                             "time")):
        b = med[side]
        verdict = "met" if b <= 0.75 * a else ("not met" if cores >= 4 else "n/a under 4 cores")
        print(f"TARGET {what} (4 cores): {b:.1f} s vs {a:.1f} s = {b / a:.2f}x ({verdict}, "
              f"{cores} cores here)")


if __name__ == "__main__":
    main()
