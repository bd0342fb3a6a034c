"""A full-size live run through the real path: 1M optimizer steps x 8 ranks, 10M output lines.

By default 100k steps (1M lines) go through the real path (minutes) and the live pass is timed
again at 1M steps without the runner; `--steps 1000000 --compare` runs the full size through the
real path to the end (the runner keeps no record dicts: the live fold holds the run).

A synthetic trainer (fullsize_trainer.py, a real subprocess) writes the probe's per-rank JSONL
files and its output lines as fast as it can; the real Runner tails and reads them, the real
bus records every event into a real SQLite store, and the real live checker (Verifier
.run_candidate) judges the candidate against two references of the same length (built from
arrays: references are inputs here, not timed). A drift is planted at 95% of the run.

Printed: time from the step that completes the drift window to the alarm (target <= 2 s), the
live checker's CPU share of one core (target <= 5%), ingest rates, peak RSS; then one live pass
of the previous checker (every record rebuilt: RunRecords.from_records + run_checks) against
one pass of the incremental one (fold one second of new records + snapshot + run_checks), on
the same records at 10% and 100% of the run, as a ratio. The machine is shared: the load
average is printed with the figures.

    .venv/bin/python -m tests.bench.bench_fullsize [--steps 1000000] [--ranks 8] [--lines 10]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from portside.core.checks import RunEnd, RunRecords, run_checks
from portside.core.checks.records import steps as steps_mod
from portside.core.checks.records.records_fold import IncrementalRecords
from portside.core.log import events as ev
from portside.core.log.bus import EventBus
from portside.core.log.criteria import DEFAULT_CRITERIA
from portside.core.run.runner import RunResult
from portside.core.session.candidate_run import LIVE_CHECK_IDLE, LIVE_CHECK_S
from portside.core.session.verify import RunReport, Verifier
from portside.store import Store

HERE = Path(__file__).resolve().parent
TRAINER = HERE / "fullsize_trainer.py"
PER_EPOCH = 1000  # as the trainer
# The checks before the fold's arrays and carried facts grew by a sixteenth, not by half or
# double, and a rolling window kept only its last sums (issue 30 item 4): timed and weighed
# side by side with the current ones, on the same records, their alarms compared.
PREVIOUS = "a40c0bc"
FOLD_TARGET_MB = 250  # the fold at 1M steps x 8 ranks, carried facts included


def reference(seed: int, n: int, ranks: int, cls: Any = RunRecords) -> RunRecords:
    """What the trainer writes, undrifted, as arrays (rank 0's series plus every rank's);
    `cls`: the RunRecords class of the implementation that will judge against it."""
    rng = np.random.default_rng(seed)
    k = np.arange(n)
    base = 2.0 * np.exp(-3.0 * k / n) + 0.1
    gn = 0.8 + 0.3 * rng.random(n)
    lr = 0.1 * 0.5 ** (k * 4 // n)
    extra = {"epoch": k // PER_EPOCH, "batch": k % PER_EPOCH + 1,
             "epoch_batches": np.full(n, PER_EPOCH),
             "param_sum": np.where(k % 10 == 0, 100.0 + k * 1e-3, np.nan)}
    facts = {"type": "facts", "backend": "cpu", "device_kind": "CPU", "device_name": "cpu",
             "device_count": 1, "world_size": ranks}

    def rank(r: int) -> RunRecords:
        return cls.from_arrays(
            loss=base + 0.02 * rng.standard_normal(n), grad_norm=gn, max_norm=np.ones(n),
            lr=lr, step_s=0.01 * (1.0 + 0.1 * rng.random(n)), facts={**facts, "rank": r},
            extra=extra,
            name=f"ref{seed}/rank{r}")
    per = {r: rank(r) for r in range(ranks)}
    main = per[0]
    out = cls.from_arrays(loss=main.loss, grad_norm=gn, max_norm=main.max_norm, lr=lr,
                                 step_s=main.step_s, facts={**facts, "rank": 0}, extra=extra,
                                 end=RunEnd(exit_code=0, wall_s=1.0), name=f"ref{seed}")
    if ranks > 1:
        out.ranks = per
    out.rank_facts = {r: x.facts for r, x in per.items()}  # type: ignore[misc]
    return out


def as_report(rec: RunRecords, i: int) -> RunReport:
    result = RunResult(run_id=rec.name, exit_code=0, signal=None, reason="exit", wall_s=1.0,
                       records=[], tail=[])
    return RunReport(rec.name, "reference", i, "passed", result, rec, {})


def loadavg() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg()) + \
        f" on {os.cpu_count()} cores (a shared machine)"


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def compare(refs: list[RunRecords], records: list[dict], upto: int, per_s: int) -> str:
    """One pass of each checker on the records up to the `upto`-th, in CPU seconds of this
    process (the wall clock of a shared machine says more about the neighbours); best of 2."""
    prefix = records[:upto]
    old, new = [], []
    for _ in range(2):
        t0 = time.process_time()
        run_checks(refs, RunRecords.from_records(prefix, None, "cand"), DEFAULT_CRITERIA, "cpu",
                   False)
        old.append(time.process_time() - t0)
        live = IncrementalRecords()
        live.add(prefix[: max(upto - per_s, 0)])  # folded on earlier passes
        t0 = time.process_time()
        live.add(prefix[max(upto - per_s, 0):])
        run_checks(refs, live.snapshot(None, "cand"), DEFAULT_CRITERIA, "cpu", False)
        new.append(time.process_time() - t0)
        del live
    o, n = min(old), min(new)
    steps = sum(1 for r in prefix if r.get("type") == "step" and r.get("rank") == 0)
    # The old loop slept max(1 s, 9 x its pass): it judged every max(1, 10 x pass) s.
    return (f"  {steps:>9,} steps: previous (rebuild) pass {o * 1e3:8.0f} ms CPU -> judged every "
            f"{max(1.0, 10 * o):5.1f} s | incremental pass {n * 1e3:6.0f} ms CPU "
            f"(fold {per_s:,} new records) | ratio {o / n:5.1f}x")


async def live_run(args: argparse.Namespace, tmp: Path) -> None:
    n, ranks = args.steps, args.ranks
    drift_at = int(n * 0.95)
    t0 = time.perf_counter()
    refs = [reference(s, n, ranks) for s in (1, 2)]
    print(f"references: 2 x {n:,} steps x {ranks} ranks from arrays "
          f"({time.perf_counter() - t0:.1f} s, not timed below)")
    store = Store(tmp / "bench.sqlite")
    bus = EventBus(store.recorder)
    raised: list[tuple[float, ev.AlarmRaised]] = []
    bus.subscribe(lambda e: raised.append((time.time(), e)) if isinstance(e, ev.AlarmRaised)
                  else None)
    own = [0]  # records portside makes itself (what it saw of the run's processes)
    bus.subscribe(lambda e: own.__setitem__(0, own[0] + sum(
        1 for r in e.records if r.get("source") == "portside"))
                  if isinstance(e, ev.RunRecord) else None)
    ver = Verifier(bus, "bench-fullsize", DEFAULT_CRITERIA, "cpu", tmp / "probe")
    ver.references = [as_report(r, i + 1) for i, r in enumerate(refs)]
    cmd = (f"{sys.executable} -S {TRAINER} {n} {ranks} {args.lines} {drift_at} 7")
    c0, w0 = time.process_time(), time.perf_counter()
    report = await ver.run_candidate(cmd, tmp)
    wall = time.perf_counter() - w0
    cpu = time.process_time() - c0
    t1 = time.perf_counter()
    store.recorder.flush()
    lag = time.perf_counter() - t1
    res = report.result
    lines = n * args.lines
    st = ver.live_stats
    print(f"run: {report.outcome}, {wall:.1f} s wall, {res.record_count:,} records, "
          f"{lines:,} output lines; {loadavg()}")
    print(f"ingest (runner + bus + store, one process): {res.record_count / wall:,.0f} "
          f"records/s + {lines / wall:,.0f} lines/s; store committed {lag:.2f} s after the run "
          f"ended; process CPU {cpu:.0f} s ({cpu / wall:.0%} of a core)")
    print(f"peak RSS {rss_mb():,.0f} MB (the runner keeps no record dicts: the live fold's "
          "arrays, the references' and the store's buffers)")
    if args.compare:
        # For the comparisons below, read what the probe wrote (the runner did not keep it):
        # ~2 KB a record as dicts, so a full-size run is measured with --compare (none).
        res.records = probe_records(res.probe_files)
        assert len(res.records) + own[0] == res.record_count, (len(res.records), own[0],
                                                               res.record_count)
    drift = [(t, e) for t, e in raised if e.check == "numeric-drift"]
    if not drift:
        print("DRIFT NOT RAISED: " + ", ".join(e.check for _, e in raised))
        raise SystemExit(1)
    t_alarm, alarm = drift[0]
    at = int(alarm.evidence["alarm_step"])
    t_step = step_written_at(res.probe_files, at)
    others = sorted({e.check for _, e in raised} - {"numeric-drift"})
    late = t_alarm - t_step
    print(f"TARGET drift raised <= 2 s after the step that completes its window: drift planted "
          f"at step {drift_at:,}; left the envelope from step {alarm.evidence['first_step']:,}; "
          f"window completed at step {at:,}; alarm {late:.2f} s after that step was written "
          f"({'met' if late <= 2 else 'NOT met'})"
          + (f"; other alarms: {', '.join(others)}" if others else ""))
    real = (1_000_000 * ranks) / 86_400  # a day-long 1M-step run: records per second
    rate = st.records / wall
    print(f"TARGET live checker <= 5% of one core: checks {st.check_cpu_s:.1f} s CPU = "
          f"{st.check_cpu_s / wall:.1%} ({'met' if st.check_cpu_s / wall <= 0.05 else 'NOT met'}"
          f"; they pace the passes); with the fold {st.cpu_s:.1f} s = {st.cpu_s / wall:.1%} "
          f"(per record: {rate:,.0f} records/s here, {rate / real:,.0f}x a day-long 1M-step "
          f"run's {real:,.0f}/s); {st.passes} passes, {st.records:,} records folded; fold "
          f"{st.fold_s:.1f} s, checks {st.check_s:.1f} s wall; last pass "
          f"{st.last_pass_s * 1e3:.0f} ms, max {st.max_pass_s * 1e3:.0f} ms wall, "
          f"{st.max_pass_cpu_s * 1e3:.0f} ms CPU")
    if not args.compare:
        store.close()
        return
    per_s = int(len(res.records) / wall)
    print(f"one live pass, previous vs incremental, on this run's records (the fold takes the "
          f"records of one second at this run's rate; {loadavg()}):")
    for frac in args.compare:
        k = int(len(res.records) * frac)
        print(compare(refs, res.records, k, per_s))
    print(f"  at a day-long run's pace ({real:,.0f} records/s) a pass folds ~{real:,.0f} records:"
          " the share is the pass time at full size over the 1 s cadence")
    store.close()


def step_written_at(files: list[str], step: int) -> float:
    """When rank 0 wrote ``step``'s record, read from the probe's files one line at a time."""
    for name in files:
        with open(name, "rb") as fh:
            for line in fh:
                if b'"step"' in line:
                    r = json.loads(line)
                    if r.get("type") == "step" and r.get("rank") == 0 and r.get("step") == step:
                        return float(r["t"])
    raise SystemExit(f"no record of step {step} on rank 0 in {files}")


def probe_records(files: list[str]) -> list[dict]:
    out: list[dict] = []
    for name in files:
        with open(name, "rb") as fh:
            out.extend(json.loads(line) for line in fh if line.strip())
    out.sort(key=lambda r: r.get("t", 0.0))  # the ranks' files, back in the order written
    return out


def step_dicts(k0: int, k1: int, n: int, ranks: int, rng: np.random.Generator) -> list[dict]:
    """The trainer's step records for steps k0..k1-1 (undrifted), as the runner parses them."""
    out = []
    for k in range(k0, k1):
        e, b = divmod(k, PER_EPOCH)
        base = 2.0 * math.exp(-3.0 * k / n) + 0.1  # Python floats, as JSON gives them
        gn = 0.8 + 0.3 * float(rng.random())
        lr = [0.1 * 0.5 ** (k * 4 // n)]
        for r in range(ranks):
            rec = {"type": "step", "rank": r, "step": k,
                   "loss": base + 0.02 * float(rng.standard_normal()), "grad_norm": gn,
                   "max_norm": 1.0, "lr": lr, "epoch": e, "batch": b + 1,
                   "epoch_batches": PER_EPOCH, "step_s": 0.01 * (1.0 + 0.1 * float(rng.random())),
                   "t": 0.0}
            if k % 10 == 0:
                rec["param_sum"] = 100.0 + k * 1e-3
            out.append(rec)
    return out


def previous_checks(rev: str = PREVIOUS) -> tuple[ModuleType, ModuleType] | str:
    """core/checks as of `rev`, imported from git as portside.core._checks_prev (its
    relative imports reach today's portside.core); or why not."""
    root = HERE.parents[1]
    try:
        names = subprocess.run(["git", "-C", str(root), "ls-tree", "--name-only", rev,
                                "core/checks/"], check=True, capture_output=True,
                               text=True).stdout.split()
        pkg = Path(tempfile.mkdtemp(prefix="portside-prev-checks-"))
        for name in names:
            (pkg / Path(name).name).write_bytes(subprocess.run(
                ["git", "-C", str(root), "show", f"{rev}:{name}"], check=True,
                capture_output=True).stdout)
    except (OSError, subprocess.CalledProcessError) as e:
        return f"previous checks ({rev}) not available from git: {e}"
    spec = importlib.util.spec_from_file_location(
        "portside.core._checks_prev", pkg / "__init__.py", submodule_search_locations=[str(pkg)])
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod, importlib.import_module("portside.core._checks_prev.records_fold")


def held_bytes(live: Any) -> tuple[int, int]:
    """Bytes of the arrays a live fold holds (each buffer once), and of the facts its checks
    carried in the series' memos."""
    seen: set[int] = set()

    def walk(x: Any) -> int:
        if isinstance(x, np.ndarray):
            while isinstance(x.base, np.ndarray):
                x = x.base
            if id(x) in seen:
                return 0
            seen.add(id(x))
            return x.nbytes if x.base is None else 0
        if isinstance(x, dict):
            return sum(walk(v) for v in x.values())
        if isinstance(x, list | tuple):
            return sum(walk(v) for v in x)
        if type(x).__name__ == "RunRecords":
            return 0  # a reference the memo keeps alive: not the fold's
        if type(x).__module__.startswith("portside.core"):
            names = getattr(type(x), "__slots__", ()) or vars(x)
            return sum(walk(getattr(x, k)) for k in names if k != "memo" and hasattr(x, k))
        return 0

    arrays = sum(walk(sr) for sr in live.by_rank.values())
    if any(getattr(sr, "steps", 0) is None for sr in live.by_rank.values()):
        arrays += walk(steps_mod._ARANGE)  # steps 0..n-1, one array for every such series
    memo = sum(walk(sr.memo) for sr in live.by_rank.values())
    return arrays, memo


def passes_at_size(n: int, ranks: int, old_steps: int, per_pass: int) -> None:
    """One live pass at n steps x ranks without the runner (its record list would not fit):
    the candidate's records are generated and folded in chunks, only the arrays are kept.
    Timed on the same records: the current checks, the PREVIOUS ones (from git), and the
    rebuild before them, measured at old_steps (its records as dicts) and extrapolated
    linearly (a rebuild is O(records))."""
    rng = np.random.default_rng(5)
    prev = previous_checks()
    refs = [reference(s, n, ranks) for s in (1, 2)]
    facts = [{"type": "facts", "rank": r, "backend": "cpu", "device_kind": "CPU",
              "device_name": "cpu", "device_count": 1, "world_size": ranks} for r in range(ranks)]
    live = IncrementalRecords()
    live.add(facts)
    # the previous fold, with references of its own RunRecords (no memo shared)
    live_p = prev[1].IncrementalRecords() if not isinstance(prev, str) else None
    refs_p = [reference(s, n, ranks, prev[0].RunRecords) for s in (1, 2)] \
        if not isinstance(prev, str) else []
    if live_p is not None:
        live_p.add(facts)
    kept: list[dict] = list(facts)
    fold_all = fold_p = 0.0
    chunk = 2000
    for k0 in range(0, n, chunk):
        recs = step_dicts(k0, min(k0 + chunk, n), n, ranks, rng)
        c0 = time.process_time()
        live.add(recs)
        c1 = time.process_time()
        if live_p is not None:
            live_p.add(recs)
        fold_all += c1 - c0
        fold_p += time.process_time() - c1
        if k0 < old_steps:
            kept += recs
    t0 = time.process_time()
    old = run_checks(refs, RunRecords.from_records(kept, None, "c"), DEFAULT_CRITERIA, "cpu",
                     False)
    t_old = time.process_time() - t0
    steps_old = min(old_steps, n)
    del kept
    batches = []  # one second's new records per pass: the first pass warms, 3 are timed
    for _ in range(4):
        batches.append(step_dicts(n, n + per_pass // ranks, n, ranks, rng))
        n += per_pass // ranks

    def passes(lv: Any, rs: list[Any], checks: Any) -> tuple[float, list[str]]:
        times, alarms = [], []
        for more in batches:
            t0 = time.process_time()
            lv.add(more)
            alarms = checks(rs, lv.snapshot(None, "c"), DEFAULT_CRITERIA, "cpu", False)
            times.append(time.process_time() - t0)
        return min(times[1:]), [a.key for a in alarms]

    t_new, alarms = passes(live, refs, run_checks)
    arr, memo = held_bytes(live)
    count = live.count
    print(f"one live pass at {n:,} steps x {ranks} ranks (CPU s of this process, best of 3 "
          f"after a warm-up pass, each folding {per_pass:,} new records; {loadavg()}):")
    if live_p is not None:
        t_prev, alarms_p = passes(live_p, refs_p, prev[0].run_checks)
        arr_p, memo_p = held_bytes(live_p)
        same = "the same alarms" if alarms_p == alarms else f"ALARMS DIFFER: {alarms_p}"
        live_p = refs_p = None  # free them  # type: ignore[assignment]
    else:
        print(f"  {prev}")
    pace = max(LIVE_CHECK_S, (LIVE_CHECK_IDLE + 1) * t_new)  # the live loop's cadence
    line = (f"TARGET live pass at {n:,} steps x {ranks} ranks <= ~45 ms CPU (the loop sleeps "
            f"max(1 s, {LIVE_CHECK_IDLE} x the checks' CPU): fold + checks "
            f"{t_new * 1e3:.1f} ms ({'met' if t_new <= 0.045 else 'NOT met'}), a pass every "
            f"{pace:.1f} s even counting the fold")
    if not isinstance(prev, str):
        pace_p = max(LIVE_CHECK_S, (LIVE_CHECK_IDLE + 1) * t_prev)
        line += (f"; previous ({PREVIOUS}) {t_prev * 1e3:.1f} ms, a pass every {pace_p:.1f} s: "
                 f"ratio previous/new {t_prev / t_new:.1f}x; {same}")
    print(line + f"; alarms {alarms or 'none'}")
    mb = (arr + memo) / 2**20
    line = (f"TARGET live fold memory at {n:,} steps x {ranks} ranks <= {FOLD_TARGET_MB} MB, "
            f"carried facts included: {mb:,.0f} MB ({'met' if mb <= FOLD_TARGET_MB else 'NOT met'}"
            f"), {(arr + memo) / count:.1f} B a record ({arr / 2**20:,.0f} MB arrays, "
            f"{arr / count:.1f} B a record; carried facts {memo / 2**20:,.0f} MB, "
            f"{memo / count:.1f} B; {count:,} records)")
    if not isinstance(prev, str):
        mb_p = (arr_p + memo_p) / 2**20
        line += (f" vs previous ({PREVIOUS}) {mb_p:,.0f} MB, {(arr_p + memo_p) / count:.1f} B a "
                 f"record ({arr_p / 2**20:,.0f} MB arrays; carried {memo_p / 2**20:,.0f} MB): "
                 f"ratio previous/new {mb_p / mb:.2f}x")
    print(line)
    fold_line = (f"  folding all {count:,} records took {fold_all:.1f} s CPU "
                 f"({fold_all / count * 1e6:.1f} us a record)")
    if not isinstance(prev, str):
        fold_line += f" vs previous {fold_p:.1f} s ({fold_p / count * 1e6:.1f} us a record)"
    print(fold_line)
    extrap = t_old * n / steps_old
    print(f"  before the live fold: rebuild + run_checks at {steps_old:,} steps "
          f"{t_old * 1e3:.0f} ms CPU, extrapolated to {n:,} steps {extrap:.1f} s -> judged "
          f"every {10 * extrap:.0f} s; ratio ~{extrap / t_new:.0f}x; alarms "
          f"{[a.key for a in old] or 'none'}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # 100k through the runner by default (minutes); the full size through the real path:
    # --steps 1000000 --compare (no comparison: it would read every record back as dicts).
    p.add_argument("--steps", type=int, default=100_000, help="steps through the real path")
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--lines", type=int, default=10, help="output lines per step")
    p.add_argument("--compare", type=float, nargs="*", default=[0.1, 1.0],
                   help="fractions of the run at which to compare one pass of each checker")
    p.add_argument("--pass-steps", type=int, default=1_000_000,
                   help="also time a live pass at this many steps without the runner (0: no)")
    p.add_argument("--old-steps", type=int, default=50_000,
                   help="measure the previous checker at this many steps (then extrapolate)")
    p.add_argument("--pass-records", type=int, default=1000,
                   help="new records folded by each timed pass (a day-long 1M x 8 run: ~100/s)")
    args = p.parse_args()
    if args.steps:
        with tempfile.TemporaryDirectory(prefix="portside-fullsize-") as tmp:
            asyncio.run(live_run(args, Path(tmp)))
    if args.pass_steps:
        passes_at_size(args.pass_steps, args.ranks, args.old_steps, args.pass_records)


if __name__ == "__main__":
    main()
