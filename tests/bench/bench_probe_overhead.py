"""Probe overhead: the same training loop with and without the probe, interleaved (A B A B ...).

    .venv/bin/python -m tests.bench.bench_probe_overhead [--rounds 3] [--steps 60] [--clip]
        [--only cpu|xla] [--norm-every K] [--base-norm-every K]

Eager CPU with this interpreter; XLA:CPU with $PORTSIDE_XLA_PYTHON (default
~/.cache/portside/xla-venv/bin/python) when it exists. Step times come from the loop's own
perf_counter, never from the probe. Prints the median step time of each side, their ratio and
the compile counts (XLA). Target: ratio <= 1.01, equal compile counts. `--base-norm-every K`
runs side A with the probe too, its own grad norm fixed by PORTSIDE_PROBE_NORM_EVERY=K (0: no
norm), so the ratio is the cost of the norm alone; on XLA the probed side also reports the
probe's own compilations and the CPU time it spent per norm.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
XLA_PYTHON = Path(
    os.environ.get("PORTSIDE_XLA_PYTHON")
    or Path.home() / ".cache" / "portside" / "xla-venv" / "bin" / "python"
)
WARMUP = 5  # steps left out of the median: the first ones compile (XLA) or warm caches


def child(backend: str, steps: int, clip: bool, width: int, batch: int) -> None:
    """The training loop: an MLP whose step takes tens of ms on one CPU thread."""
    import torch

    torch.set_num_threads(1)  # two shared cores: one thread keeps the timing steadier
    torch.manual_seed(0)
    if backend == "xla":
        import torch_xla
        import torch_xla.debug.metrics as met

        dev = torch_xla.device()
        sync = torch_xla.sync
    else:
        dev, met = torch.device("cpu"), None

        def sync() -> None:
            pass

    layers: list[torch.nn.Module] = []
    for _ in range(4):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 1)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    x = torch.randn(batch, width).to(dev)
    y = torch.randn(batch, 1).to(dev)
    times, cpu_times = [], []
    for _ in range(steps):
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sync()
        times.append(time.perf_counter() - t0)
        cpu_times.append(time.process_time() - c0)  # this process's CPU s: blind to other load
    if backend == "xla":
        float(loss.cpu())  # wait for the last step before reading the count
    compiles = met.metric_data("CompileTime")[0] if met is not None else None
    print(
        "RESULT " + json.dumps({"times": times, "cpu": cpu_times, "compiles": compiles}), flush=True
    )


def run_once(
    python: str, backend: str, probe: bool, args: argparse.Namespace, tmp: Path, i: int,
    norm_every: int | None = None,
) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PORTSIDE_")}
    if backend == "xla":
        env["PJRT_DEVICE"] = "CPU"
    out = tmp / f"{backend}-{i}.jsonl"
    if probe:
        try:
            from portside.core.probe import inject_env
        except ImportError:  # portside not installed: the probe package alone is enough
            # kept: a python without portside (a TPU host's) finds the probe in the checkout
            sys.path.insert(0, str(REPO / "core"))
            from probe import inject_env  # type: ignore[no-redef]

        env = inject_env(env, str(out))
        if norm_every is not None:
            env["PORTSIDE_PROBE_NORM_EVERY"] = str(norm_every)
    cmd = [
        python,
        __file__,
        "--child",
        backend,
        "--steps",
        str(args.steps),
        "--width",
        str(args.width),
        "--batch",
        str(args.batch),
    ]
    if args.clip:
        cmd.append("--clip")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"{backend} run failed:\n{proc.stderr[-3000:]}")
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    result = json.loads(line[len("RESULT ") :])
    if probe:
        from portside.core.probe import _packed

        recs = [r for x in out.read_text().splitlines() for r in _packed.expand(json.loads(x))]
        result["probe_steps"] = sum(r["type"] == "step" for r in recs)
        ex = next(r for r in recs if r["type"] == "exit")
        result["probe_s"] = ex["probe_s"]
        result["probe_compiles"] = ex.get("probe_compiles", 0)
        norms = sum(r["type"] == "step" and r.get("grad_norm_source") == "probe" for r in recs)
        steady = norms - ex.get("probe_compiles", 0)  # the norms that compiled nothing
        result["norm_s"] = ex["probe_norm_s"] / steady if ex.get("probe_norm_s") else None
    return result


def bench(python: str, backend: str, args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as d:
        pairs = []
        for i in range(args.rounds):
            base = args.base_norm_every
            a = run_once(python, backend, base is not None, args, Path(d), 2 * i, base)
            b = run_once(python, backend, True, args, Path(d), 2 * i + 1, args.norm_every)
            pairs.append((a, b))
    print(
        f"[{backend}] width {args.width} batch {args.batch} clip {args.clip} norm_every {args.norm_every}; {args.rounds} rounds x {args.steps} steps (first {WARMUP} left out)"
    )
    for key, label in (("times", "wall (perf_counter)"), ("cpu", "CPU (process_time)")):
        med_a = [statistics.median(a[key][WARMUP:]) for a, _ in pairs]
        med_b = [statistics.median(b[key][WARMUP:]) for _, b in pairs]
        ratios = [mb / ma for ma, mb in zip(med_a, med_b, strict=True)]
        all_a = statistics.median(t for a, _ in pairs for t in a[key][WARMUP:])
        all_b = statistics.median(t for _, b in pairs for t in b[key][WARMUP:])
        print(
            f"  {label}: median step without probe {all_a * 1e3:.2f} ms, with probe {all_b * 1e3:.2f} ms"
        )
        print(
            f"    ratio (pooled medians) {all_b / all_a:.4f}; per round {', '.join(f'{r:.4f}' for r in ratios)}; median of rounds {statistics.median(ratios):.4f}"
        )
    if args.base_norm_every is not None:
        print(f"  (side A: the probe with PORTSIDE_PROBE_NORM_EVERY={args.base_norm_every})")
    print(
        f"  compiles  without {[a['compiles'] for a, _ in pairs]}   with {[b['compiles'] for _, b in pairs]}"
        f"   of which the probe's own {[b.get('probe_compiles') for _, b in pairs]}"
    )
    per_norm = [b["norm_s"] for _, b in pairs if b.get("norm_s")]
    if per_norm:
        step = statistics.median(t for a, _ in pairs for t in a["times"][WARMUP:])
        ms = statistics.median(per_norm) * 1e3
        print(f"  probe norm (XLA, after the sync): {ms:.3f} ms CPU to trace and launch one "
              f"= {ms / (step * 1e3) * 100:.2f}% of a median step (side A)")
    print(f"  probe step records {[b['probe_steps'] for _, b in pairs]}")
    # The probe's own time in its hooks, per step: immune to the load of other processes (it
    # leaves out the grad-norm ops that XLA runs inside the step graph).
    own = statistics.median(b["probe_s"] / (b["probe_steps"] - 1) for _, b in pairs)
    step = statistics.median(t for a, _ in pairs for t in a["times"][WARMUP:])
    print(
        f"  probe self-time {own * 1e3:.3f} ms/step = {own / step * 100:.2f}% of the median step without probe"
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--child", choices=["cpu", "xla"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--clip", action="store_true", help="clip (else the probe computes the norm)")
    p.add_argument("--only", choices=["cpu", "xla"])
    p.add_argument("--norm-every", type=int, help="PORTSIDE_PROBE_NORM_EVERY for the probed runs")
    p.add_argument("--base-norm-every", type=int,
                   help="side A runs the probe too, with this PORTSIDE_PROBE_NORM_EVERY")
    args = p.parse_args()
    if args.child:
        child(args.child, args.steps, args.clip, args.width, args.batch)
        return
    if args.only != "xla":
        bench(sys.executable, "cpu", args)
    if args.only != "cpu":
        if XLA_PYTHON.exists():
            bench(str(XLA_PYTHON), "xla", args)
        else:
            print(f"[xla] skipped: no torch_xla venv at {XLA_PYTHON} (tests/xla/make_venv.sh)")


if __name__ == "__main__":
    main()
