"""The DB's bytes per output line and per step record, against the raw text they came from.

    .venv/bin/python tests/bench/bench_db_size.py [--steps 20000]

A run is written through the real Recorder as the runner writes it: each step prints one log
line and the probe writes one step record (the probe's own fields, 8 ranks' worth of shapes
folded into one). Two pacings of the runner's 0.1 s batches: "slow" (a step every 0.1 s or
more: one line, one record per event) and "fast" (100 steps per batch). Sizes come from SQLite's
dbstat (pages each table and index holds, after VACUUM), split by writing output and records
in separate sessions of separate files. Raw text: the line plus its newline; the record's JSONL
line as the probe wrote it. Target: at most ~2x the raw text.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import sqlite_utils

from portside.core import events as ev
from portside.store import Store
from portside.store.schema import METRICS_COLUMNS


def step_record(i: int, rng: random.Random) -> dict[str, Any]:
    return {"type": "step", "t": 1_800_000_000 + i * 0.1 + rng.random() * 1e-3, "pid": 4242,
            "rank": 0, "step": i, "opt": 0, "source": "optimizer",
            "loss": 2.3 * 0.999 ** i + rng.random() * 0.01, "backward_calls": 1,
            "grad_norm": 0.5 + rng.random(), "grad_norm_source": "clip", "max_norm": 1.0,
            "clip_calls": 1, "lr": [0.001 * 0.9999 ** i], "step_s": 0.1 + rng.random() * 0.01}


def log_line(i: int, rng: random.Random) -> str:
    return (f"Train Epoch: {1 + i // 938} [{i % 938 * 64:>5}/60000 ({i % 938 / 9.38:.0f}%)]\t"
            f"Loss: {2.3 * 0.999 ** i + rng.random() * 0.01:.6f}")


def add_v3_metrics(db: Path) -> None:
    """The previous layout beside the new one: schema v3's metrics (a rowid table and an index
    holding every row again), filled with the same rows, to measure in the same file."""
    conn = sqlite3.connect(db, isolation_level=None)
    v3 = sqlite_utils.Database(conn)
    v3["metrics_v3"].create(METRICS_COLUMNS)
    v3["metrics_v3"].create_index(["session_id", "run_id", "name", "step"], index_name="v3_index")
    conn.execute("INSERT INTO metrics_v3 (session_id, run_id, step, name, value)"
                 " SELECT session_id, run_id, step, name, value FROM metrics ORDER BY seq, k")
    conn.close()


def table_bytes(db: Path) -> dict[str, int]:
    conn = sqlite3.connect(db)
    conn.execute("VACUUM")
    rows = conn.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name").fetchall()
    conn.close()
    return dict(rows)


def write(db: Path, what: str, steps: int, per_batch: int) -> int:
    """Write ``steps`` lines or records in events of ``per_batch``; returns their raw bytes."""
    rng = random.Random(1)
    raw = 0
    with Store(db) as store:
        rec = store.recorder
        sid = f"size-{what}"
        rec.append(ev.SessionStarted(session_id=sid, project="/p", target="tpu:v5e"))
        rec.append(ev.RunStarted(session_id=sid, run_id="cand-3f9a2c1b0d4e", role="candidate",
                                 attempt=1, command="python train.py", target="tpu:v5e"))
        for lo in range(0, steps, per_batch):
            idx = range(lo, min(steps, lo + per_batch))
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
    return raw


def measure(steps: int) -> list[tuple[str, float, float, dict[str, float]]]:
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        base = table_bytes(_empty(Path(tmp) / "empty.db"))
        for what in ("output", "records"):
            for pacing, per_batch in (("slow", 1), ("fast", 100)):
                db = Path(tmp) / f"{what}-{pacing}.db"
                raw = write(db, what, steps, per_batch)
                add_v3_metrics(db)
                sizes = table_bytes(db)
                extra = {k: (v - base.get(k, 0)) / steps for k, v in sizes.items()
                         if v - base.get(k, 0) > 0}
                old = {k: extra.pop(k, 0.0) for k in ("metrics_v3", "v3_index")}
                # Before: v3's metrics in place of v4's, and no replay blocks (v4 too).
                before = (sum(extra.values()) - extra.get("metrics", 0.0)
                          - extra.get("replay_blocks", 0.0) + sum(old.values()))
                out.append((f"{what} ({pacing})", sum(extra.values()), raw / steps, extra,
                            before))
    return out


def _empty(db: Path) -> Path:
    Store(db).close()
    return db


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=20_000)
    args = ap.parse_args()
    for label, db_per, raw_per, parts, before in measure(args.steps):
        what = "line" if label.startswith("output") else "step record"
        detail = ", ".join(f"{k} {v:.0f}" for k, v in sorted(parts.items(), key=lambda x: -x[1]))
        ratio = db_per / raw_per
        print(f"TARGET DB bytes per {what}, {label}: {db_per:.0f} B vs raw {raw_per:.0f} B: "
              f"{ratio:.2f}x ({'met' if ratio <= 2 else 'NOT met'} at <= ~2x; {detail}); "
              f"before (schema v3) {before:.0f} B, {before / raw_per:.2f}x: after/before "
              f"{db_per / before:.2f} (load average {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
