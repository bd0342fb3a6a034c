"""What the seal on probe records costs (issue 24 item 3), both sides, as ratios in one run.

    .venv/bin/python -m tests.bench.bench_seal [--records 20000] [--rounds 5]

Probe side: the probe's own write path (`Probe._write_locked`, loaded by path as in a training
process) for a typical step record, to /dev/null, with the run's key unset and set. Runner
side: `json.loads` of a line alone against `seal.check_line` + `json.loads` of the sealed line.
Rounds interleave A and B; medians per record. The machine is shared: read the ratios. Then
the tag alone, each side's way, the seal before issue 30 (HMAC-SHA256, cut to 128 bits) beside
the one now (keyed BLAKE2b, 128 bits).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import time
from pathlib import Path

from portside.core.run import seal

REPO = Path(__file__).resolve().parents[2]

STEP = {"type": "step", "t": 1796170319.8086743, "pid": 1234, "rank": 0, "step": 1234,
        "loss": 0.41234567890123, "grad_norm": 0.5123456789, "max_norm": 1.0, "lr": [0.1],
        "step_s": 0.0123, "epoch": 1, "batch": 12, "epoch_batches": 100, "samples": 64}


def _probe() -> object:
    spec = importlib.util.spec_from_file_location("_bench_probe", REPO / "core/probe/_probe.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    writer = mod._writer.RecordWriter("/dev/null", None, lambda: 0)  # the probe's writer
    writer.fd = os.open(os.devnull, os.O_WRONLY)
    return writer


def _time(fn: object, n: int) -> float:
    t0 = time.perf_counter()
    fn(n)  # type: ignore[operator]
    return (time.perf_counter() - t0) / n * 1e6


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    probe = _probe()
    key = seal.new_key()

    def write(sealed: bool):  # one record a call, as the probe flushes at a slow step rate
        def go(n: int) -> None:
            probe.seal = key.encode() if sealed else None  # type: ignore[attr-defined]
            for _ in range(n):
                probe.write([dict(STEP)])  # type: ignore[attr-defined]
        return go

    plain = json.dumps({**STEP, "seq": 5}).encode()
    sealed_line = seal.seal_line(key, json.dumps({**STEP, "seq": 5})).encode()
    kb = key.encode()

    def parse(n: int) -> None:
        for _ in range(n):
            json.loads(plain)

    def check(n: int) -> None:
        for _ in range(n):
            body, why = seal.check_line(kb, sealed_line)
            json.loads(body)

    sides = {"probe write, no key": write(False), "probe write, sealed": write(True),
             "runner parse": parse, "runner check + parse": check}
    times: dict[str, list[float]] = {k: [] for k in sides}
    for _ in range(args.rounds):
        for name, fn in sides.items():
            times[name].append(_time(fn, args.records))
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in med.items():
        print(f"{k:24s} {v:7.2f} us/record")
    print(f"probe: sealed / unsealed = {med['probe write, sealed'] / med['probe write, no key']:.2f}"
          f" (+{med['probe write, sealed'] - med['probe write, no key']:.2f} us a record)")
    print(f"runner: checked / parsed = {med['runner check + parse'] / med['runner parse']:.2f}"
          f" (+{med['runner check + parse'] - med['runner parse']:.2f} us a record)")
    macs(kb, plain, args)
    return 0


def macs(key: bytes, body: bytes, args: argparse.Namespace) -> None:
    """The tag of one line: the probe keys once and copies per line; the runner is one-shot."""
    import hashlib
    import hmac

    hm, bk = hmac.new(key, digestmod="sha256"), hashlib.blake2b(key=key, digest_size=16)

    def probe_hmac(n: int) -> None:
        for _ in range(n):
            h = hm.copy()
            h.update(body)
            h.digest()[:16].hex()

    def probe_blake2b(n: int) -> None:
        for _ in range(n):
            h = bk.copy()
            h.update(body)
            h.hexdigest()

    def runner_hmac(n: int) -> None:
        for _ in range(n):
            hmac.digest(key, body, "sha256")[:16].hex()

    def runner_blake2b(n: int) -> None:
        for _ in range(n):
            hashlib.blake2b(body, key=key, digest_size=16).hexdigest()

    sides = [probe_hmac, probe_blake2b, runner_hmac, runner_blake2b]
    times: dict[str, list[float]] = {f.__name__: [] for f in sides}
    for _ in range(args.rounds):
        for f in sides:
            times[f.__name__].append(_time(f, args.records))
    med = {k: statistics.median(v) for k, v in times.items()}
    for side in ("probe", "runner"):
        old, new = med[f"{side}_hmac"], med[f"{side}_blake2b"]
        print(f"{side} tag: HMAC-SHA256 {old:.2f} us, keyed BLAKE2b {new:.2f} us a line "
              f"({new / old:.2f}x); load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    raise SystemExit(main())
