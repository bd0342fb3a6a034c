"""Store ingest: events/s through Recorder.append vs raw sqlite3.executemany of the same rows.

Both sides write the same rows into a fresh WAL file with the same pragmas, measured in one run,
interleaved, best of three (the machine is shared and noisy). Target: >= 100k events/s and
>= 50% of raw.   python -m tests.bench.bench_ingest [N]
"""

from __future__ import annotations

import sqlite3
import sys
import tempfile
import time
from pathlib import Path

from portside.core.log import events as ev
from portside.store import Store
from portside.store.projections import event_row
from portside.store.schema import connect, migrate

N = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000


def make_events(sid: str) -> list[ev.Event]:
    out: list[ev.Event] = []
    for i in range(N):
        if i % 10 == 9:
            out.append(ev.RunRecord(session_id=sid, run_id="r1", records=[
                {"type": "step", "step": i, "loss": 1.0 / (i + 1), "grad_norm": 0.5, "lr": [0.01]}]))
        else:
            out.append(ev.RunOutput(session_id=sid, run_id="r1",
                                    lines=[f"Train Epoch: 1 [{i}/{N}] Loss: 0.{i % 997:04d}"]))
    return out


def bench_store(path: Path) -> float:
    events = make_events("bench")
    with Store(path) as store:
        rec = store.recorder
        t0 = time.perf_counter()
        for e in events:
            rec.append(e)
        rec.flush()
        return N / (time.perf_counter() - t0)


def bench_raw(path: Path) -> float:
    # The same rows the store writes: event rows plus the derived metrics rows.
    events = make_events("bench")
    rows, metrics = [], []
    for seq, e in enumerate(events, start=1):
        e.seq, e.ts = seq, time.time()
        rows.append(event_row(e, ev.encode(e)))  # as stored (schema v5: slim bodies)
        if isinstance(e, ev.RunRecord):
            r = e.records[0]
            for key in ("loss", "grad_norm"):
                metrics.append((1, key, seq, 0, r["step"], r[key]))
            metrics.append((1, "lr", seq, 0, r["step"], r["lr"][0]))
    conn = connect(path)
    migrate(conn, path)
    t0 = time.perf_counter()
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO events VALUES (?,?,?,?,?)", rows)
    conn.execute("INSERT INTO metric_runs (id, session_id, run_id) VALUES (1, 'bench', 'r1')")
    conn.executemany("INSERT INTO metric_points (run, name, seq, k, step, value)"
                     " VALUES (?,?,?,?,?,?)", metrics)
    conn.execute("COMMIT")
    rate = N / (time.perf_counter() - t0)
    conn.close()
    return rate


def main() -> None:
    store_rates, raw_rates = [], []
    with tempfile.TemporaryDirectory() as d:
        for i in range(3):
            store_rates.append(bench_store(Path(d) / f"store{i}.db"))
            raw_rates.append(bench_raw(Path(d) / f"raw{i}.db"))
    s, r = max(store_rates), max(raw_rates)
    print(f"events: {N} (90% run.output, 10% run.record with derived metrics rows)")
    print(f"store append path : {s:>10,.0f} events/s  (runs: {', '.join(f'{x:,.0f}' for x in store_rates)})")
    print(f"raw executemany   : {r:>10,.0f} events/s  (runs: {', '.join(f'{x:,.0f}' for x in raw_rates)})")
    print(f"ratio store/raw   : {s / r:.2f}")
    print(f"sqlite {sqlite3.sqlite_version}")


if __name__ == "__main__":
    main()
