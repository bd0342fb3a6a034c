"""Benchmark: every check over 100k steps x 10 runs (9 references + 1 candidate), each with
loss, grad_norm, max_norm, lr, step_s, compiles and compile_s series. Prints milliseconds.
Target: < 100 ms for one `run_checks` call (final=True, the most work).

    .venv/bin/python tests/bench/bench_checks.py [steps] [runs]
"""

from __future__ import annotations

import sys
import time

import numpy as np

from portside.core.checks import RunEnd, RunRecords, run_checks
from portside.core.log.criteria import parse_criteria


def make_run(seed: int, n: int, drift: float = 1.0) -> RunRecords:
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
    return RunRecords.from_arrays(
        loss=loss, grad_norm=grad, max_norm=np.full(n, 1.0), lr=lr,
        step_s=0.02 + 0.001 * rng.random(n), compiles=compiles, compile_s=np.zeros(n),
        facts=facts, exit={"compiles": 4, "fallback_ops": {"aten::nonzero": 1}},
        metrics={"accuracy": [90.0 + rng.random()]}, end=RunEnd(exit_code=0, wall_s=2000.0))


def bench(n: int, runs: int, drift: float, reps: int = 5) -> tuple[float, float, list[str]]:
    """(cold ms, warm ms, alarm keys). Cold: fresh records, nothing memoised (the end-of-run
    call). Warm: the same reference records judged again (a live caller re-checks as the
    candidate grows; derived reference series are memoised on the records)."""
    crit = parse_criteria('[goal]\nmetric = "accuracy"\n[performance]\nmax_step_time_ratio = 2\n')
    cold, warm = [], []
    for rep in range(reps):
        refs = [make_run(s + 1000 * rep, n) for s in range(1, runs)]
        cand = make_run(100 + rep, n, drift)
        t0 = time.perf_counter()
        alarms = run_checks(refs, cand, crit, "tpu:v5e", final=True)
        cold.append(time.perf_counter() - t0)
        again = make_run(100 + rep, n, drift)  # a fresh candidate, the same references
        t0 = time.perf_counter()
        run_checks(refs, again, crit, "tpu:v5e", final=True)
        warm.append(time.perf_counter() - t0)
    return float(np.median(cold)) * 1e3, float(np.median(warm)) * 1e3, [a.key for a in alarms]


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    for label, drift in (("another seed", 1.0), ("drifting loss", 1.5)):
        cold, warm, keys = bench(n, runs, drift)
        print(f"run_checks {n} steps x {runs} runs ({label}): cold {cold:.1f} ms, "
              f"warm references {warm:.1f} ms (medians of 5); alarms: {', '.join(keys) or 'none'}")
    # Ingest for one run, for scale: parsing dicts is the caller's one-off cost per call.
    recs = [{"type": "step", "step": i, "loss": 1.0, "grad_norm": 0.5, "max_norm": 1.0,
             "lr": [0.1], "step_s": 0.02, "compiles": 3, "compile_s": 0.0} for i in range(n)]
    t0 = time.perf_counter()
    RunRecords.from_records(recs)
    print(f"RunRecords.from_records {n} step records: {(time.perf_counter() - t0) * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
