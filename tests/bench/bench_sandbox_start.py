"""Per-run start overhead of the sandbox, before and after issue 24, side by side.

    .venv/bin/python -m tests.bench.bench_sandbox_start [--rounds 10]

Each round starts, in turn: the command bare; the sandbox profile of before (``Sandbox(...,
hardened=False)``: no user namespace, capabilities kept as root, no seccomp, unsized tmpfs,
no cgroup); and today's (user namespace, caps dropped, seccomp filter passed as a descriptor,
sized tmpfs, the run's cgroup made, joined and removed; "hardened" is the same without the
cgroup), each the way LocalExecutor starts a
run (the argv built, the process started and waited for). Commands: ``/bin/true`` and
``python -c pass``. Prints the median of the rounds per profile, and after/before as ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from portside.core.run import limits, seccomp
from portside.core.run.limits import Limits
from portside.core.run.sandbox import Sandbox, unavailable


def _bare(argv: list[str], cwd: Path) -> None:
    subprocess.run(argv, cwd=cwd, check=True)


def _before(sb: Sandbox) -> Callable[[list[str], Path], None]:
    old = replace(sb, hardened=False, limits=Limits())

    def start(argv: list[str], cwd: Path) -> None:
        subprocess.run(old.wrap(argv, cwd), cwd=cwd, check=True)
    return start


def _after(sb: Sandbox) -> Callable[[list[str], Path], None]:
    def start(argv: list[str], cwd: Path) -> None:
        key = str(cwd / "probe.jsonl")
        fd = os.open(seccomp.filter_path(), os.O_RDONLY | os.O_CLOEXEC)
        try:
            full = [*limits.start(key, sb.limits), *sb.wrap(argv, cwd, seccomp_fd=fd)]
            subprocess.run(full, cwd=cwd, check=True, pass_fds=(fd,))
        finally:
            os.close(fd)
            limits.finish(key)
    return start


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    a = ap.parse_args()
    if unavailable():
        print(f"no sandbox here: {unavailable()}")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        ws.mkdir()
        sb = Sandbox.for_project(Path(tmp) / "proj", limits=Limits.from_fractions(
            16384, 0.9, 0.25)).with_writable(ws)
        # "hardened": today's profile without a cgroup (moving a task into one waits for an
        # RCU grace period in the kernel: the cgroup's own share of "after").
        profiles = {"bare": _bare, "before": _before(sb),
                    "hardened": _after(replace(sb, limits=replace(sb.limits, max_processes=0,
                                                                  max_memory=0))),
                    "after": _after(sb)}
        commands = {"/bin/true": ["/bin/true"], "python -c pass": [sys.executable, "-c", "pass"]}
        print(f"uid {os.getuid()}, limits via {limits.mechanism()}, {a.rounds} rounds, ms")
        print(f"{'command':16} {'bare':>7} {'before':>7} {'hardened':>8} {'after':>7}"
              f" {'after/before':>13} {'overhead after/before':>22}")
        for label, argv in commands.items():
            times: dict[str, list[float]] = {p: [] for p in profiles}
            for fn in profiles.values():
                fn(argv, ws)  # warm: the interpreter query is cached, pages are in
            for _ in range(a.rounds):
                for name, fn in profiles.items():
                    t0 = time.perf_counter()
                    fn(argv, ws)
                    times[name].append((time.perf_counter() - t0) * 1000)
            med = {p: statistics.median(v) for p, v in times.items()}
            over_b, over_a = med["before"] - med["bare"], med["after"] - med["bare"]
            print(f"{label:16} {med['bare']:7.1f} {med['before']:7.1f} {med['hardened']:8.1f}"
                  f" {med['after']:7.1f}"
                  f" {med['after'] / med['before']:13.2f} {over_a / over_b:22.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
