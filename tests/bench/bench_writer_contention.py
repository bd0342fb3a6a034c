"""Why the store's writer inserts thousands of rows per statement.

    .venv/bin/python -m tests.bench.bench_writer_contention [N]

The sqlite3 module releases the GIL around every statement step. A writer thread running
``executemany`` with one row per step must win the GIL back after every row; while another
thread runs Python (a producer appending events), each of those waits can last the switch
interval. This inserts the same N event rows four ways, side by side in one run: one row per
statement and ``store.projections.insert_rows``, each alone and next to a thread spinning in
Python. Prints rows/s and the ratio contended/alone of each (a way that is too slow stops after
10 s; its rate is over the rows it wrote).
"""

from __future__ import annotations

import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from portside.core.log import events as ev
from portside.store.projections import event_row, insert_rows
from portside.store.schema import connect, migrate

N = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
SLICE = 10_000  # rows per call, about what the writer commits at a time under load
BUDGET_S = 10.0
SQL = "INSERT INTO events (session_id, seq, ts, kind, body) VALUES (?, ?, ?, ?, ?)"


def rows() -> list[tuple[str, int, float, str, str]]:
    out = []
    for i in range(N):
        e = ev.RunOutput(session_id="bench", run_id="r1", lines=[f"Train Epoch: 1 [{i}/{N}] Loss: 0.{i % 997:04d}"])
        e.seq, e.ts = i + 1, time.time()
        out.append(event_row(e, ev.encode(e)))
    return out


def one_per_step(conn: sqlite3.Connection, data: list) -> None:
    conn.executemany(SQL, data)


def many_per_step(conn: sqlite3.Connection, data: list) -> None:
    insert_rows(conn, SQL, data)


def timed(path: Path, data: list, write: Callable[[sqlite3.Connection, list], None],
          contended: bool) -> float:
    conn = connect(path)
    migrate(conn, path)
    stop = threading.Event()

    def spin() -> None:
        n = 0
        while not stop.is_set():
            n += 1

    spinner = threading.Thread(target=spin)
    if contended:
        spinner.start()
    # In slices, stopping after BUDGET_S: one row per step next to a busy thread can be slow
    # enough (a switch interval per row) to take minutes for the whole set.
    t0 = time.perf_counter()
    done = 0
    conn.execute("BEGIN IMMEDIATE")
    while done < len(data) and time.perf_counter() - t0 < BUDGET_S:
        write(conn, data[done : done + SLICE])
        done += len(data[done : done + SLICE])
    conn.execute("COMMIT")
    rate = done / (time.perf_counter() - t0)
    stop.set()
    if contended:
        spinner.join()
    assert conn.execute("SELECT COUNT(*) FROM events").fetchone()[0] == done
    conn.close()
    return rate


def main() -> None:
    data = rows()
    results: dict[tuple[str, bool], float] = {}
    with tempfile.TemporaryDirectory() as d:
        for i in range(2):  # interleaved, best of two
            for name, fn in (("one row per step", one_per_step), ("insert_rows", many_per_step)):
                for contended in (False, True):
                    rate = timed(Path(d) / f"{i}-{fn.__name__}-{contended}.db", data, fn, contended)
                    key = (name, contended)
                    results[key] = max(results.get(key, 0.0), rate)
    print(f"rows: {N} event rows in calls of {SLICE}, one transaction each way")
    for name in ("one row per step", "insert_rows"):
        alone, busy = results[(name, False)], results[(name, True)]
        print(f"{name:17}: alone {alone:>9,.0f} rows/s   next to a busy Python thread {busy:>9,.0f} rows/s"
              f"   ratio {busy / alone:.2f}")


if __name__ == "__main__":
    main()
