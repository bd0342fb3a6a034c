"""The DB's bytes per output line and per step record, against the raw text they came from,
before (main at schema v4: whole bodies, an event per 0.1 s tick, metrics spelling out session
and run ids) and after (schema v5: slim bodies, a trickle held into fewer events, metric points
keyed by a run number), side by side in one run.

    .venv/bin/python -m tests.bench.bench_db_size [--steps 5000]

A run is written through the real Recorder: each step prints one log line and the probe writes
one step record. The pacings: a step each 0.1 s, 0.5 s and 2 s, and "fast" (1000 steps/s).
Which lines (records) share an event is decided by the runner's own policy: before, every 0.1 s
tick's; after, core/run/batching.py's Batcher with the runner's constants, on a simulated clock
(lines join their batch as they come, records at the tick that polls them). The "before" file is
the same rows in v4's layout: slim bodies written whole again, v4's metrics table in place of
v5's. Sizes come from SQLite's dbstat (pages of each table and index, after VACUUM), output and
records in separate files. Raw text: the line plus its newline; the record's JSONL line as the
probe wrote it. Target: at most ~2x the raw text.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from portside.core.log import events as ev
from portside.core.run import runner, watch_output, watch_records
from portside.core.run.batching import Batcher
from portside.store import Store
from portside.store.codec import full_body
from portside.store.schema import METRICS_V4

PACINGS = (("2 s", 2.0), ("0.5 s", 0.5), ("0.1 s", 0.1), ("0.02 s", 0.02), ("0.005 s", 0.005),
           ("0.001 s", 0.001))


def step_record(i: int, rng: random.Random) -> dict[str, Any]:
    return {"type": "step", "t": 1_800_000_000 + i * 0.1 + rng.random() * 1e-3, "pid": 4242,
            "rank": 0, "step": i, "opt": 0, "source": "optimizer",
            "loss": 2.3 * 0.999 ** i + rng.random() * 0.01, "backward_calls": 1,
            "grad_norm": 0.5 + rng.random(), "grad_norm_source": "clip", "max_norm": 1.0,
            "clip_calls": 1, "lr": [0.001 * 0.9999 ** i], "step_s": 0.1 + rng.random() * 0.01}


def log_line(i: int, rng: random.Random) -> str:
    return (f"Train Epoch: {1 + i // 938} [{i % 938 * 64:>5}/60000 ({i % 938 / 9.38:.0f}%)]\t"
            f"Loss: {2.3 * 0.999 ** i + rng.random() * 0.01:.6f}")


def batches(n: int, every: float, what: str, adaptive: bool) -> Iterator[range]:
    """The steps each event holds, as the runner (before or after) batches them."""
    tick = runner.OUTPUT_BATCH_S
    if what == "output":
        b: Batcher[int] = Batcher(hold_s=watch_output.OUTPUT_HOLD_S, tick_s=tick,
                                  big_bytes=watch_output.OUTPUT_BIG_BYTES)
        size = len(log_line(0, random.Random(1))) + 4  # as the runner counts a line
    else:
        b = Batcher(hold_s=watch_records.RECORD_HOLD_S, tick_s=tick,
                    big_bytes=watch_records.RECORD_BIG_BYTES)
        size = len(json.dumps(step_record(0, random.Random(1))))
    i, now = 0, 0.0
    while i < n or b:
        now += tick
        while i < n and i * every < now:
            first = b.add([i], i * every if what == "output" else now, size)
            i += 1
            if first and adaptive:
                yield range(first[0], first[-1] + 1)
            if what == "output" and len(b) >= watch_output.OUTPUT_BATCH_LINES:
                got = b.take()
                yield range(got[0], got[-1] + 1)
        if b and (not adaptive or b.due(now) or i >= n):
            got = b.take()
            yield range(got[0], got[-1] + 1)


def write(db: Path, what: str, steps: int, every: float, adaptive: bool) -> tuple[int, int]:
    """Write ``steps`` lines or records; returns (raw bytes, events)."""
    rng = random.Random(1)
    raw = events = 0
    with Store(db) as store:
        rec = store.recorder
        sid = f"size-{what}"
        rec.append(ev.SessionStarted(session_id=sid, project="/p", target="tpu:v5e"))
        rec.append(ev.RunStarted(session_id=sid, run_id="cand-3f9a2c1b0d4e", role="candidate",
                                 attempt=1, command="python train.py", target="tpu:v5e"))
        for idx in batches(steps, every, what, adaptive):
            events += 1
            if what == "output":
                lines = [log_line(i, rng) for i in idx]
                raw += sum(len(x.encode()) + 1 for x in lines)
                rec.append(ev.RunOutput(session_id=sid, run_id="cand-3f9a2c1b0d4e", lines=lines))
            else:
                recs = [step_record(i, rng) for i in idx]
                raw += sum(len(json.dumps(r).encode()) + 1 for r in recs)
                rec.append(ev.RunRecord(session_id=sid, run_id="cand-3f9a2c1b0d4e",
                                        records=recs))
        rec.flush()
    return raw, events


def to_v4(db: Path) -> None:
    """The same rows in schema v4's layout: whole bodies, v4's metrics table."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.create_function("full_body", 5, full_body, deterministic=True)
    conn.execute("BEGIN")
    conn.execute("UPDATE events SET body = full_body(session_id, seq, ts, kind, body)")
    conn.execute("ALTER TABLE metric_points RENAME TO points_v5")
    conn.execute("DROP VIEW metrics")
    conn.execute(METRICS_V4)
    conn.execute("INSERT INTO metrics (session_id, run_id, name, seq, k, step, value)"
                 " SELECT r.session_id, r.run_id, p.name, p.seq, p.k, p.step, p.value"
                 " FROM points_v5 p JOIN metric_runs r ON r.id = p.run")
    conn.execute("DROP TABLE points_v5")
    conn.execute("DROP TABLE metric_runs")
    conn.execute("PRAGMA user_version = 4")
    conn.execute("COMMIT")
    conn.close()


def table_bytes(db: Path) -> dict[str, int]:
    conn = sqlite3.connect(db)
    conn.execute("VACUUM")
    rows = conn.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name").fetchall()
    conn.close()
    return dict(rows)


def size(db: Path, base: dict[str, int], steps: int) -> dict[str, float]:
    sizes = table_bytes(db)
    return {k: (v - base.get(k, 0)) / steps for k, v in sizes.items() if v - base.get(k, 0) > 0}


def measure(steps: int) -> Iterator[tuple[str, str, float, float, dict[str, float], float,
                                          int, int]]:
    with tempfile.TemporaryDirectory() as tmp:
        empty = Path(tmp) / "empty.db"
        Store(empty).close()
        base = table_bytes(empty)
        for what in ("output", "records"):
            for pacing, every in PACINGS:
                n = steps if every >= 0.05 else steps * 4
                old_db, new_db = Path(tmp) / f"{what}-{pacing}-v4.db", Path(tmp) / "new.db"
                raw, old_events = write(old_db, what, n, every, adaptive=False)
                to_v4(old_db)
                raw_new, new_events = write(new_db, what, n, every, adaptive=True)
                assert raw == raw_new
                before = sum(size(old_db, base, n).values())
                parts = size(new_db, base, n)
                yield (what, pacing, sum(parts.values()), raw / n, parts, before,
                       old_events, new_events)
                for db in (old_db, new_db):
                    for suffix in ("", "-wal", "-shm"):
                        Path(f"{db}{suffix}").unlink(missing_ok=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=5000)
    args = ap.parse_args()
    for what, pacing, db_per, raw_per, parts, before, old_ev, new_ev in measure(args.steps):
        unit = "line" if what == "output" else "step record"
        every = dict(PACINGS)[pacing]
        detail = ", ".join(f"{k} {v:.0f}" for k, v in sorted(parts.items(), key=lambda x: -x[1]))
        ratio = db_per / raw_per
        n = args.steps if every >= 0.05 else args.steps * 4
        rate = f"; grows {db_per / every:.0f} B/s" if every >= 0.5 else ""
        print(f"TARGET DB bytes per {unit}, a step each {pacing}: {db_per:.0f} B vs raw "
              f"{raw_per:.0f} B: {ratio:.2f}x ({'met' if ratio <= 2 else 'NOT met'} at <= ~2x; "
              f"{n / new_ev:.1f} per event; {detail}{rate}); before (v4, {n / old_ev:.1f} per "
              f"event) {before:.0f} B, {before / raw_per:.2f}x: after/before "
              f"{db_per / before:.2f} (load average {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
