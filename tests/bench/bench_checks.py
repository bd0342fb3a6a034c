"""Benchmark: every check over 100k steps x 10 runs (9 references + 1 candidate), each with
loss, grad_norm, max_norm, lr, step_s, compiles and compile_s series. Prints CPU milliseconds.
Target: < 100 ms for one `run_checks` call (final=True, the most work). With `--previous REV`
the checks of that commit (from git) run on the same records, interleaved, side by side.

    .venv/bin/python -m tests.bench.bench_checks [steps] [runs] [--previous REV]
"""

from __future__ import annotations

import argparse
import os
import time
from types import ModuleType
from typing import Any

import numpy as np

from portside.core import checks
from portside.core.checks import RunRecords
from portside.core.log.criteria import parse_criteria


def make_run(seed: int, n: int, drift: float = 1.0, mod: ModuleType = checks) -> RunRecords:
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    base = 2.3 * np.exp(-t / (n / 10)) + 0.2
    loss = base * np.exp(0.2 * rng.standard_normal(n))
    loss[n // 2:] *= drift
    grad = (1 + base) * np.exp(0.4 * rng.standard_normal(n))
    lr = 0.1 * 0.5 ** (t // (n // 4))
    compiles = np.minimum(t + 1, 3).astype(float)
    facts = {"backend": "torch_xla", "device_kind": "TPU", "device_name": "TPU v5e",
             "device_count": 1, "real_devices": ["TPU:0"]}
    return mod.RunRecords.from_arrays(  # type: ignore[no-any-return]
        loss=loss, grad_norm=grad, max_norm=np.full(n, 1.0), lr=lr,
        step_s=0.02 + 0.001 * rng.random(n), compiles=compiles, compile_s=np.zeros(n),
        facts=facts, exit={"compiles": 4, "fallback_ops": {"aten::nonzero": 1}},
        metrics={"accuracy": [90.0 + rng.random()]}, end=mod.RunEnd(exit_code=0, wall_s=2000.0))


def bench(n: int, runs: int, drift: float, mods: dict[str, ModuleType],
          reps: int = 5) -> dict[str, tuple[float, float, list[str]]]:
    """Per checks module: (cold ms, warm ms, alarm keys). Cold: fresh records, nothing
    memoised (the end-of-run call). Warm: the same reference records judged again (a live
    caller re-checks as the candidate grows; derived reference series are memoised on the
    records). The modules take turns within each repetition, first one then the other. CPU
    time of this process: on a shared machine the wall time says more about the neighbours."""
    crit = parse_criteria('[goal]\nmetric = "accuracy"\n[performance]\nmax_step_time_ratio = 2\n')
    times: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in mods}
    keys: dict[str, list[str]] = {}
    for rep in range(reps):
        order = list(mods.items())
        for name, mod in order[::-1] if rep % 2 else order:
            cold, warm = times[name]
            refs = [make_run(s + 1000 * rep, n, mod=mod) for s in range(1, runs)]
            cand = make_run(100 + rep, n, drift, mod)
            t0 = time.process_time()
            alarms: Any = mod.run_checks(refs, cand, crit, "tpu:v5e", final=True)
            cold.append(time.process_time() - t0)
            again = make_run(100 + rep, n, drift, mod)  # a fresh candidate, the same refs
            t0 = time.process_time()
            mod.run_checks(refs, again, crit, "tpu:v5e", final=True)
            warm.append(time.process_time() - t0)
            keys[name] = [a.key for a in alarms]
    return {k: (float(np.median(c)) * 1e3, float(np.median(w)) * 1e3, keys[k])
            for k, (c, w) in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("steps", type=int, nargs="?", default=100_000)
    ap.add_argument("runs", type=int, nargs="?", default=10)
    ap.add_argument("--previous", help="also time core/checks as of this commit (from git)")
    args = ap.parse_args()
    n, runs = args.steps, args.runs
    mods = {"new": checks}
    if args.previous:
        from tests.bench.bench_fullsize import previous_checks  # its loader of core/checks from git

        prev = previous_checks(args.previous)
        if isinstance(prev, str):
            raise SystemExit(prev)
        mods = {"previous": prev[0], "new": checks}
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for label, drift in (("another seed", 1.0), ("drifting loss", 1.5)):
        got = bench(n, runs, drift, mods)
        cold, warm, keys = got["new"]
        print(f"run_checks {n} steps x {runs} runs ({label}): cold {cold:.1f} ms, "
              f"warm references {warm:.1f} ms CPU (medians of 5); alarms: {', '.join(keys) or 'none'}")
        if "previous" in got:
            pc, pw, pk = got["previous"]
            same = "the same alarms" if pk == keys else f"ALARMS DIFFER: {pk}"
            print(f"TARGET run_checks ({label}) not slower than {args.previous}: cold "
                  f"{pc:.1f} ms previous / {cold:.1f} ms new = {pc / cold:.2f}x, warm "
                  f"{pw:.1f} / {warm:.1f} ms = {pw / warm:.2f}x; {same}")
    # Ingest for one run, for scale: parsing dicts is the caller's one-off cost per call.
    recs = [{"type": "step", "step": i, "loss": 1.0, "grad_norm": 0.5, "max_norm": 1.0,
             "lr": [0.1], "step_s": 0.02, "compiles": 3, "compile_s": 0.0} for i in range(n)]
    t0 = time.perf_counter()
    RunRecords.from_records(recs)
    print(f"RunRecords.from_records {n} step records: {(time.perf_counter() - t0) * 1e3:.0f} ms")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
