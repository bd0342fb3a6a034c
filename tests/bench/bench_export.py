"""Exports at size: peak RSS of `portside export` as the session grows, and the DB's bytes.

    .venv/bin/python tests/bench/bench_export.py [--events 1000000 4000000] [--keep DIR]
    (the issue's size: --events 1000000 10000000, about 2.5 GB of disk and ~10 min)

Each size is a session of run.output events (one ~40-char log line each, as a slow trainer
prints) written straight into SQLite by a recursive CTE (seconds for millions of rows; the
bodies are what the recorder writes for such an event). Each export runs in a fresh process;
its peak RSS comes from wait4() (ru_maxrss). Target: RSS flat as events grow (ratio ~1).
Formats: the events recording (JSONL) to a file, to a pipe and to a terminal (a pty, which
before streaming was buffered whole), and the interventions CSV (--all).
"""

from __future__ import annotations

import argparse
import os
import pty
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from portside.core.log import events as ev
from portside.store import Store
from portside.store.jsonl import import_events

SID = "20260301-big-0001"
LINE = "Train Epoch: 1 [{n}/60000] Loss: 0.4321"


def make_session(db: Path, n: int, sid: str = SID) -> None:
    """A session of ``n`` events: session.started, then run.started and run.output rows."""
    store = Store(db)
    t0 = 1_800_000_000.0
    import_events(store, [
        ev.SessionStarted(session_id=sid, seq=1, ts=t0, project="/p", target="tpu:v5e"),
        ev.RunStarted(session_id=sid, seq=2, ts=t0 + 1, run_id="r1", role="candidate",
                      attempt=1, command="python train.py", target="tpu:v5e"),
    ])
    conn = store.conn
    conn.execute("BEGIN IMMEDIATE")
    conn.execute(
        "WITH RECURSIVE s(k) AS (SELECT 3 UNION ALL SELECT k + 1 FROM s WHERE k < ?)"
        " INSERT INTO events (session_id, seq, ts, kind, body)"
        " SELECT ?, k, ? + k * 0.01, 'run.output',"  # slim: the envelope is the columns
        " '{\"run_id\":\"r1\",\"lines\":[\"' ||"
        " replace(?, '{n}', k) || '\"],\"stream\":\"mixed\"}' FROM s",
        (n, sid, t0, LINE),
    )
    conn.execute("COMMIT")
    store.close()


def _peak_rss_mb(cmd: list[str], stdout: int | None = None) -> tuple[float, float]:
    """Run ``cmd``; (peak RSS in MB, wall s). ``stdout``: an fd, else a pipe drained here."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=stdout if stdout is not None else subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    if proc.stdout is not None:
        while proc.stdout.read(1 << 20):
            pass
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd}: exit {proc.returncode}")
    return usage.ru_maxrss / 1024, time.perf_counter() - t


def _pty_rss_mb(cmd: list[str]) -> tuple[float, float]:
    """The export written to a terminal (a pty we drain), where it passes through json_safe."""
    master, slave = pty.openpty()
    done = threading.Event()

    def drain() -> None:
        while True:
            try:
                if not os.read(master, 1 << 20):
                    break
            except OSError:
                break
        done.set()

    threading.Thread(target=drain, daemon=True).start()
    try:
        return _peak_rss_mb(cmd, stdout=slave)
    finally:
        os.close(slave)
        done.wait(10)
        os.close(master)


def export_rss(db: Path, how: str, out: Path) -> tuple[float, float]:
    base = [sys.executable, "-m", "portside.cli", "--db", str(db), "export"]
    if how == "file":
        return _peak_rss_mb([*base, SID, "-o", str(out)])
    if how == "pipe":
        return _peak_rss_mb([*base, SID])
    if how == "tty":
        return _pty_rss_mb([*base, SID])
    if how == "interventions-csv":
        return _peak_rss_mb([*base, "--all", "--what", "interventions", "--format", "csv"])
    raise ValueError(how)


HOWS = ("file", "tty", "interventions-csv")  # a pipe: --how pipe


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--events", type=int, nargs="+", default=[1_000_000, 4_000_000])
    ap.add_argument("--keep", type=Path, help="keep the databases in this folder")
    ap.add_argument("--how", nargs="+", default=list(HOWS),
                    choices=["file", "pipe", "tty", "interventions-csv"])
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="portside-bench-export-"))
    try:
        where = args.keep or tmp
        where.mkdir(parents=True, exist_ok=True)
        rss: dict[str, list[float]] = {h: [] for h in args.how}
        for n in args.events:
            db = where / f"export-{n}.db"
            if not db.exists():
                t = time.perf_counter()
                make_session(db, n)
                print(f"{n:,} events generated in {time.perf_counter() - t:.1f} s "
                      f"({db.stat().st_size / n:.0f} DB bytes/event)")
            for how in args.how:
                mb, wall = export_rss(db, how, tmp / "out.jsonl")
                rss[how].append(mb)
                print(f"  export {how:<18} {n:>11,} events: peak RSS {mb:6.1f} MB "
                      f"in {wall:5.1f} s")
            (tmp / "out.jsonl").unlink(missing_ok=True)
        load = os.getloadavg()[0]
        for how in args.how:
            first, last = rss[how][0], rss[how][-1]
            print(f"TARGET export ({how}) in constant memory: RSS {first:.1f} MB at "
                  f"{args.events[0]:,} events, {last:.1f} MB at {args.events[-1]:,}: ratio "
                  f"{last / first:.2f} ({'met' if last / first <= 1.15 else 'NOT met'}; "
                  f"load average {load:.2f})")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
