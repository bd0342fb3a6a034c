"""[stop] (issue 40.2): what a candidate already decided wrong costs, today and with [stop].

    .venv/bin/python tests/bench/bench_stop_decided.py [--quick] [--rounds 2]

Real runs through the real Verifier, as `verify` makes them (a session's ledger on its bus):

1. A 2,000-step candidate of tests/fixtures/trainers/train_tiny.py with `--max-norm 0.05` (the
   change shows at step 0: every step clips) against two references of the same length.
   "today": `[stop] alarms = []`, it trains to its end; "after": the shipped [stop]. Its
   run-seconds (the run's wall time) side by side, rounds interleaved.
2. For each stopped run, the time from its first clipped step (the step record's own time, as
   the probe wrote it) to the run ended (run.finished's time).
3. Correct ports never stopped: tests/bench/acceptance_trainer.py with other seeds (and a few
   with `--drop-last`, a data setting the default criteria allow) and train_tiny.py with other
   seeds, each against its own two references, under the shipped [stop].

`--quick`: a 500-step candidate, one round, 6 correct runs (the targets are stated for the
full run).
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

from portside.core.log import events as ev
from portside.core.log.bus import EventBus
from portside.core.log.criteria import DEFAULT_CRITERIA, parse_criteria
from portside.core.log.decided import decided
from portside.core.log.ledger import STOPPED, Ledger
from portside.core.session.verify import Verifier

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "fixtures" / "trainers" / "train_tiny.py"
ACCEPT = REPO / "tests" / "bench" / "acceptance_trainer.py"
sys.path.insert(0, str(REPO / "tests"))
from doubles import MemorySink  # noqa: E402

OFF = parse_criteria("[stop]\nalarms = []\n", "today.toml")  # today: nothing stops a run


class Session:
    def __init__(self, tmp: Path, name: str) -> None:
        self.sink = MemorySink()
        self.bus = EventBus(self.sink)
        self.ledger = Ledger()
        self.bus.subscribe(self.ledger.apply)
        self.bus.publish(ev.SessionStarted(session_id=name, project=str(tmp), target="cpu",
                                           criteria=DEFAULT_CRITERIA.to_dict()))
        self.v = Verifier(self.bus, name, DEFAULT_CRITERIA, "cpu", tmp / f"probe-{name}",
                          stall_s=300.0, timeout_s=1800, ledger=self.ledger)
        self.tmp = tmp

    def first_clipped(self, run_id: str) -> tuple[float, float]:
        """(run started -> its first clipped step, that step -> the run ended), seconds."""
        steps = [r for e in self.sink.events if isinstance(e, ev.RunRecord) and e.run_id == run_id
                 for r in e.records if r.get("type") == "step"]
        first = min(float(s["t"]) for s in steps if float(s["grad_norm"]) > float(s["max_norm"]))
        start = next(e.ts for e in self.sink.events
                     if isinstance(e, ev.RunStarted) and e.run_id == run_id)
        end = next(e.ts for e in self.sink.events
                   if isinstance(e, ev.RunFinished) and e.run_id == run_id)
        return first - start, end - first


async def wrong_port(tmp: Path, steps: int, rounds: int) -> dict[str, list[float]]:
    s = Session(tmp, "maxnorm")
    cmd = f"{sys.executable} {TINY} --steps {steps}"
    refs = await s.v.run_references(2, cmd, tmp)
    assert [r.outcome for r in refs] == ["passed", "passed"], [r.alarms for r in refs]
    out: dict[str, list[float]] = {"today": [], "after": [], "lag": [], "saved": [],
                                   "startup": [], "startup_today": []}
    for _ in range(rounds):
        for side in ("today", "after"):
            s.v.criteria = OFF if side == "today" else DEFAULT_CRITERIA
            before = s.ledger.compute_saved_s
            c = await s.v.run_candidate(cmd + " --max-norm 0.05", tmp)
            assert c.outcome == "failed-silent", (side, c.outcome, c.alarms)
            assert (c.result.reason == STOPPED) == (side == "after"), (side, c.result.reason)
            out[side].append(c.result.wall_s)
            if side == "today":
                out["startup_today"].append(s.first_clipped(c.run_id)[0])
            if side == "after":
                startup, lag = s.first_clipped(c.run_id)
                out["startup"].append(startup)
                out["lag"].append(lag)
                out["saved"].append(s.ledger.compute_saved_s - before)
                print(f"  after: {decided(s.ledger).line()}", flush=True)
            print(f"  {side}: {c.result.wall_s:.1f} s, {c.records.n} steps", flush=True)
    return out


async def correct_ports(tmp: Path, runs: int) -> list[tuple[str, str, str]]:
    """(trainer and flags, outcome, reason) of each correct candidate."""
    py = sys.executable
    plans = [(f"{py} {ACCEPT}", [f"--seed {k}" for k in range(2, 2 + runs // 2)]
              + [f"--seed {k} --drop-last" for k in range(40, 40 + runs // 4)]),
             (f"{py} {TINY}", [f"--seed {k}" for k in range(3, 3 + runs - runs // 2 - runs // 4)])]
    seen: list[tuple[str, str, str]] = []
    for n, (base, flags) in enumerate(plans):
        s = Session(tmp, f"correct{n}")
        refs = await s.v.run_references(2, base, tmp)
        assert [r.outcome for r in refs] == ["passed", "passed"], [r.alarms for r in refs]
        for f in flags:
            c = await s.v.run_candidate(f"{base} {f}", tmp)
            label = f"{Path(base.split()[-1]).name} {f}"
            seen.append((label, c.outcome, c.result.reason))
            print(f"  {label}: {c.outcome} ({c.result.reason})", flush=True)
    return seen


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--rounds", type=int, default=0)
    a = p.parse_args()
    steps = 500 if a.quick else 2000
    rounds = a.rounds or (1 if a.quick else 2)
    n_correct = 6 if a.quick else 20
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        print(f"1. train_tiny.py --steps {steps} --max-norm 0.05, {rounds} round(s)", flush=True)
        w = asyncio.run(wrong_port(tmp, steps, rounds))
        print(f"3. {n_correct} correct ports under the shipped [stop]", flush=True)
        ok = asyncio.run(correct_ports(tmp, n_correct))
    cores = os.cpu_count() or 1
    print(f"bench_stop_decided: {'--quick, ' if a.quick else ''}{cores} cores, load average "
          f"{os.getloadavg()[0]:.1f}, {time.perf_counter() - t0:.0f} s in all")
    today, after = statistics.median(w["today"]), statistics.median(w["after"])
    print(f"  run-seconds today {', '.join(f'{x:.1f}' for x in w['today'])}; with [stop] "
          f"{', '.join(f'{x:.2f}' for x in w['after'])}; ledger's compute saved "
          f"{', '.join(f'{x:.1f}' for x in w['saved'])} s; of a stopped run's seconds, "
          f"{', '.join(f'{x:.2f}' for x in w['startup'])} s went before its first step "
          "(the interpreter, torch, the data: no stop can come sooner)")
    share = after / today
    print(f"TARGET {steps}-step max_norm candidate's run-seconds with [stop] <= 5% of today's: "
          f"{after:.2f} s vs {today:.1f} s = {share:.1%} "
          f"({'met' if share <= 0.05 else 'not met'}{', --quick: 500 steps' if a.quick else ''})")
    # What [stop] can act on: the run past its first step (its start is the same either way).
    past_today = statistics.median(t - s for t, s in zip(w["today"], w["startup_today"],
                                                         strict=True))
    past_after = statistics.median(t - s for t, s in zip(w["after"], w["startup"], strict=True))
    print(f"  past the first step: {past_after:.2f} s with [stop] vs {past_today:.1f} s today "
          f"= {past_after / past_today:.1%}")
    lag = max(w["lag"])
    print(f"TARGET first clipped step (its record's time) to the run ended <= 2 s: "
          f"{', '.join(f'{x:.2f}' for x in w['lag'])} s, max {lag:.2f} s "
          f"({'met' if lag <= 2.0 else 'not met'})")
    stopped = [x for x in ok if x[2] == STOPPED]
    outcomes = {o: sum(1 for x in ok if x[1] == o) for o in sorted({x[1] for x in ok})}
    print(f"TARGET correct ports stopped early: {len(stopped)} of {len(ok)} "
          f"({'met' if not stopped and len(ok) >= 20 else 'not met' if stopped else 'too few'}"
          f"; outcomes {outcomes})")
    for x in stopped:
        print(f"  stopped: {x[0]}")


if __name__ == "__main__":
    main()
