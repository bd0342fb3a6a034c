"""Lag over SSH: a line printed on the host → its run.output event here; records per second.

    .venv/bin/python -m tests.bench.bench_ssh_lag [--lines 300] [--records 100000]

Starts a real sshd on a loopback port (tests/integration/loopback_sshd.py; root, Debian's
openssh-server) and runs, through the Runner, (1) a script printing a wall-clock stamp every
20 ms and (2) a script writing --records probe records as fast as it can, once over SSH and
once locally for comparison. Lag = the event's emit time minus the stamp (same clock: the host
is this machine). Records/s = records / (last record's arrival - first record's write).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from portside.core.log import events as ev
from portside.core.run.runner import Executor, LocalExecutor, Runner, RunSpec
from portside.core.run.ssh import SSHExecutor
from tests.integration.loopback_sshd import ALIAS, LoopbackSSHD, why_not

PRINTER = ("import time\nfor i in range({n}):\n    print(f'stamp {{time.time()!r}}', flush=True)\n"
           "    time.sleep(0.02)\n")
# Sealed as the probe seals its lines (core/run/seal.py): the runner refuses anything else.
WRITER = ("import hashlib, json, os, time\nout = open(os.environ['PORTSIDE_PROBE_OUT'], 'a')\n"
          "key = os.environ['PORTSIDE_PROBE_SEAL'].encode()\n"
          "for i in range({n}):\n    b = json.dumps({{'type': 'hold', 'value': i, 't': time.time(),"
          " 'seq': i}})\n"
          "    m = hashlib.blake2b(b.encode(), key=key, digest_size=16).hexdigest()\n"
          "    out.write(b[:-1] + ', \"mac\": \"' + m + '\"}}\\n')\n    if i % 100 == 99:\n"
          "        out.flush()\nout.close()\n")


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


async def _run(executor: Executor, probe: Path, cwd: Path, script: str, tag: str
               ) -> tuple[list[float], list[float], float]:
    (cwd / f"{tag}.py").write_text(script)
    lags: list[float] = []
    rec_arrivals: list[float] = []
    rec_lags: list[float] = []

    def emit(event: ev.Event) -> None:
        now = time.time()
        if isinstance(event, ev.RunOutput):
            for line in event.lines:
                if line.startswith("stamp "):
                    lags.append(now - float(line.split()[1]))
        elif isinstance(event, ev.RunRecord):
            for r in event.records:
                if r.get("type") == "hold" and "value" in r:
                    rec_arrivals.append(now)
                    rec_lags.append(now - r["t"])

    runner = Runner("bench", emit, probe, executor=executor)
    spec = RunSpec(run_id=f"{tag}-{ev.new_id()[:6]}", role="candidate", attempt=1,
                   command=f"python3 {tag}.py", cwd=cwd, target="cpu", timeout_s=600)
    t0 = time.time()
    result = await runner.run(spec)
    assert result.reason == "exit" and result.exit_code == 0, result
    first = min((now - lag for now, lag in zip(rec_arrivals, rec_lags, strict=True)), default=t0)
    rate = len(rec_arrivals) / (max(rec_arrivals) - first) if rec_arrivals else 0.0
    return lags, rec_lags, rate


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=300)
    ap.add_argument("--records", type=int, default=100000)
    args = ap.parse_args()
    if why_not():
        sys.exit(f"bench_ssh_lag: {why_not()}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        server = LoopbackSSHD(root / "sshd").start()
        cwd = root / "project"
        cwd.mkdir()
        try:
            ssh = SSHExecutor(ALIAS, "bench", ssh_config=server.config)
            for name, executor in (("ssh", ssh), ("local", LocalExecutor())):
                lags, _, _ = asyncio.run(_run(executor, root / "probe", cwd,
                                              PRINTER.format(n=args.lines), "printer"))
                _, rec_lags, rate = asyncio.run(_run(executor, root / "probe", cwd,
                                                     WRITER.format(n=args.records), "writer"))
                print(f"{name:5}  line→event lag over {len(lags)} lines: "
                      f"p50 {statistics.median(lags) * 1e3:.0f} ms  "
                      f"p95 {_pct(lags, 0.95) * 1e3:.0f} ms  max {max(lags) * 1e3:.0f} ms   "
                      f"records: {rate:,.0f}/s ({len(rec_lags)} of {args.records}), "
                      f"record lag p95 {_pct(rec_lags, 0.95) * 1e3:.0f} ms")
            ssh.close()
        finally:
            server.kill()


if __name__ == "__main__":
    main()
