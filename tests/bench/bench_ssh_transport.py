"""tar vs rsync to a host: what a second attempt with a one-file change costs.

    .venv/bin/python -m tests.bench.bench_ssh_transport [--reps 3] [--files 300] [--data-mb 32]

Starts a real sshd on a loopback port (tests/integration/loopback_sshd.py; root, Debian's
openssh-server and rsync) and, per repetition and transport (interleaved, a fresh session
each), runs three attempts of a trivial command through the Runner on a project of --files
source files (4 KiB each) and one --data-mb data file: attempt 1 (nothing on the host yet),
attempt 2 (one source file edited), attempt 3 (no change). Per attempt: bytes sent (tar: the
archive, rsync: its --stats "Total bytes sent"), seconds from the start of the run's shipping
to its folder being ready there, and the run's whole wall time. Medians over the repetitions.
Loopback has no bandwidth limit, so the bytes are the figure that carries to a real link
(``at 10 MB/s`` is bytes / 10e6, arithmetic, not measured).
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
from portside.core.run.runner import Runner, RunSpec
from portside.core.run.ssh import SSHExecutor
from tests.integration.loopback_sshd import ALIAS, LoopbackSSHD, why_not


def _project(root: Path, files: int, data_mb: int) -> Path:
    proj = root / "project"
    (proj / "src").mkdir(parents=True)
    for i in range(files):
        (proj / "src" / f"mod{i:03d}.py").write_text(f"# module {i}\n" + os.urandom(2048).hex())
    (proj / "data.bin").write_bytes(os.urandom(data_mb << 20))
    return proj


async def _attempt(executor: SSHExecutor, probe: Path, proj: Path, n: int) -> float:
    runner = Runner("bench", lambda e: None, probe, executor=executor)
    spec = RunSpec(run_id=f"cand{n}-{ev.new_id()[:6]}", role="candidate", attempt=n,
                   command="true", cwd=proj, target="cpu", timeout_s=600)
    t0 = time.monotonic()
    result = await runner.run(spec)
    assert result.reason == "exit" and result.exit_code == 0, result
    return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--files", type=int, default=300)
    ap.add_argument("--data-mb", type=int, default=32)
    args = ap.parse_args()
    if why_not():
        sys.exit(f"bench_ssh_transport: {why_not()}")
    figures: dict[tuple[str, int], list[tuple[int, float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        server = LoopbackSSHD(root / "sshd").start()
        proj = _project(root, args.files, args.data_mb)
        size = sum(p.stat().st_size for p in proj.rglob("*") if p.is_file())
        try:
            for rep in range(args.reps):
                for transport in ("tar", "rsync"):
                    (proj / "src" / "mod000.py").write_text(f"# rep {rep}, attempt 1\n")
                    ex = SSHExecutor(ALIAS, f"bench-{transport}-{rep}", ssh_config=server.config,
                                     transport=transport)
                    for n in (1, 2, 3):
                        if n == 2:
                            (proj / "src" / "mod000.py").write_text(f"# rep {rep}, attempt 2\n")
                        wall = asyncio.run(_attempt(ex, root / "probe", proj, n))
                        assert ex.transport == transport
                        shipped = ex.shipped[-1]
                        figures.setdefault((transport, n), []).append(
                            (shipped["bytes"], shipped["seconds"], wall))
                    ex.close()
        finally:
            server.kill()
    print(f"project: {args.files} files + {args.data_mb} MiB data = {size / 1e6:.1f} MB; "
          f"medians of {args.reps} sessions per transport (interleaved)")
    print(f"{'transport':9} {'attempt':13} {'bytes sent':>12} {'ship s':>7} {'run wall s':>10} "
          f"{'at 10 MB/s':>10}")
    what = {1: "1 (first)", 2: "2 (one file)", 3: "3 (no change)"}
    for n in (1, 2, 3):
        for transport in ("tar", "rsync"):
            rows = figures[(transport, n)]
            b = statistics.median(r[0] for r in rows)
            s = statistics.median(r[1] for r in rows)
            w = statistics.median(r[2] for r in rows)
            print(f"{transport:9} {what[n]:13} {b:12,.0f} {s:7.2f} {w:10.2f} {b / 10e6:9.2f}s")


if __name__ == "__main__":
    main()
