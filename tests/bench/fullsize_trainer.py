"""A synthetic multi-rank training run for bench_fullsize.py: standard library only.

Writes what the probe writes (FORMAT.md: rank 0 to $PORTSIDE_PROBE_OUT, rank R beside it as
<stem>.rank<R><suffix>; facts first, a step record per optimizer step) and LINES output lines
per step on stdout, as fast as it can; each step's time varies (+-10%) and every 10th step has
the ranks' parameter checksum, as the probe writes them. From step DRIFT_AT on, rank 0's loss is
1.3x (a planted drift). Every record carries its wall time `t`, so the benchmark can time the alarm from the
step that completed the drift window.

    python -S fullsize_trainer.py STEPS RANKS LINES DRIFT_AT SEED
"""

import hashlib
import json
import math
import os
import random
import sys
import time

steps, ranks, lines, drift_at, seed = (int(x) for x in sys.argv[1:6])
PER_EPOCH = 1000
out = os.environ["PORTSIDE_PROBE_OUT"]
stem, suffix = os.path.splitext(out)
files = [open(out if r == 0 else f"{stem}.rank{r}{suffix}", "w", buffering=1 << 20)  # noqa: SIM115
         for r in range(ranks)]  # closed at the end
KEY = os.environ.get("PORTSIDE_PROBE_SEAL", "").encode()
seqs = [0] * ranks


def sealed(r: int, body: str) -> str:
    """A record line as the probe seals it (core/run/seal.py): numbered per file, tagged."""
    body = f'{body[:-1]},"seq":{seqs[r]}}}'
    seqs[r] += 1
    if KEY:
        tag = hashlib.blake2b(body.encode(), key=KEY, digest_size=16).hexdigest()
        body = f'{body[:-1]}, "mac": "{tag}"}}'
    return body + "\n"


rng = random.Random(seed)
for r, fh in enumerate(files):
    fh.write(sealed(r, json.dumps({"type": "facts", "rank": r, "backend": "cpu", "device_kind": "CPU",
                         "device_name": "cpu", "device_count": 1, "world_size": ranks,
                         "param_devices": [f"cpu:{r}"]})))
filler = "  data loader: prefetched batch, 8 workers busy, 0 waiting" + " " * 20
flush_at = time.time()
write = sys.stdout.write
for k in range(steps):
    e, b = divmod(k, PER_EPOCH)
    base = 2.0 * math.exp(-3.0 * k / steps) + 0.1
    gn = 0.8 + 0.3 * rng.random()
    lr = [0.1 * 0.5 ** (k * 4 // steps)]
    t = time.time()
    for r, fh in enumerate(files):
        loss = base + 0.02 * rng.gauss(0.0, 1.0)
        if r == 0 and k >= drift_at:
            loss *= 1.3
        rec = {"type": "step", "rank": r, "step": k, "loss": loss, "grad_norm": gn,
               "max_norm": 1.0, "lr": lr, "epoch": e, "batch": b + 1, "epoch_batches": PER_EPOCH,
               "step_s": 0.01 * (1.0 + 0.1 * rng.random()), "t": t}
        if k % 10 == 0:  # as the probe: the ranks' parameter checksum every 10th step
            rec["param_sum"] = 100.0 + k * 1e-3
        fh.write(sealed(r, json.dumps(rec, separators=(",", ":"))))
    write(f"Train Epoch: {e} [{b + 1}/{PER_EPOCH}] Loss: {base:.4f}\n")
    for _ in range(lines - 1):
        write(filler + "\n")
    if k & 63 == 0 and t - flush_at > 0.05:  # what a probe's line-buffered writes show
        flush_at = t
        for fh in files:
            fh.flush()
        sys.stdout.flush()
for r, fh in enumerate(files):
    fh.write(sealed(r, json.dumps({"type": "exit", "rank": r, "compiles": 0})))
    fh.close()
sys.stdout.flush()
