"""Exports at size: peak RSS of `portside export` as the session grows, and the DB's bytes.

    .venv/bin/python -m tests.bench.bench_export [--events 1000000 4000000] [--keep DIR]
    (the issue's size: --events 1000000 10000000, ~2 GB of disk in $TMPDIR for the largest,
    deleted after it unless --keep; generating it takes ~4 min with --gen output, far longer
    through the Batch writer: 9 min a million on a loaded 2-core machine)

Each size is a session generated in bulk through the store's Batch writer (bench_replay's:
agent turns, edits with their interventions, runs with heavy output and step records,
alarms; --gen output: run.output rows only, by a recursive CTE, seconds for millions). Each
export runs in a fresh process; its RSS is sampled along the way (/proc/PID/status, every
0.1 s), its peak is its own high-water mark (VmHWM): flat means the RSS at the end of an
export is what it was early on, and the peak at the largest size is the smallest's (ratio ~1).
Formats: the events recording (JSONL) to a file, to a pipe and to a terminal (a pty, which
before streaming was buffered whole); interventions, alarms and runs in csv, json, jsonl and
md; the Markdown report.
"""

from __future__ import annotations

import argparse
import os
import pty
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from portside.core.log import events as ev
from portside.store import Store
from portside.store.jsonl import import_events
from tests.bench.bench_replay import SID as REPLAY_SID
from tests.bench.bench_replay import generate
from tests.cli_run import cli_argv

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


def make_mixed(db: Path, n: int) -> str:
    """bench_replay's session of ``n`` events, through the store's Batch writer; its id."""
    generate(db, n).close()
    return REPLAY_SID


SAMPLES: list[float] = []  # the last export's RSS samples (MB), in order
PEAK: list[float] = [0.0]  # the last export's own high-water mark (MB)


def _sample_rss(pid: int, done: threading.Event) -> None:
    """VmRSS every 0.1 s, and VmHWM: the peak of the exported process's own memory. (wait4's
    ru_maxrss is not: a child's counts the memory of the process it was forked from, this
    one's, which holds the generator's.)"""
    SAMPLES.clear()
    PEAK[0] = 0.0
    while not done.wait(0.1):
        try:
            with open(f"/proc/{pid}/status") as fh:
                got = {k: int(v.split()[0]) for k, _, v in (x.partition(":") for x in fh)
                       if k in ("VmRSS", "VmHWM")}
        except OSError:
            return
        if "VmRSS" in got:  # none once it exited (a zombie has no memory)
            SAMPLES.append(got["VmRSS"] / 1024)
            PEAK[0] = max(PEAK[0], got["VmHWM"] / 1024)


def along(samples: list[float]) -> str:
    """The RSS at a tenth, half and nine tenths of the export, MB."""
    if not samples:
        return "no samples"
    return "/".join(f"{samples[min(int(len(samples) * f), len(samples) - 1)]:.0f}"
                    for f in (0.1, 0.5, 0.9))


def _peak_rss_mb(cmd: list[str], stdout: int | None = None) -> tuple[float, float]:
    """Run ``cmd``; (peak RSS in MB, wall s); its RSS along the way in SAMPLES. ``stdout``:
    an fd, else a pipe drained here. The peak: the last VmHWM sampled (within 0.1 s of the
    end: an export's memory is flat, its last moments are no different)."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=stdout if stdout is not None else subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    done = threading.Event()
    sampler = threading.Thread(target=_sample_rss, args=(proc.pid, done), daemon=True)
    sampler.start()
    if proc.stdout is not None:
        while proc.stdout.read(1 << 20):
            pass
    _, status, _ = os.wait4(proc.pid, 0)
    done.set()
    sampler.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd}: exit {proc.returncode}")
    return PEAK[0], time.perf_counter() - t


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


def export_rss(db: Path, sid: str, how: str, out: Path) -> tuple[float, float]:
    base = cli_argv("export", db=db)
    if how == "file":
        return _peak_rss_mb([*base, sid, "-o", str(out)])
    if how == "pipe":
        return _peak_rss_mb([*base, sid])
    if how == "tty":
        return _pty_rss_mb([*base, sid])
    if how == "report-md":
        return _peak_rss_mb([*base, sid, "--what", "report", "-o", str(out)])
    what, fmt = how.split("-")  # the tables: one session's, or every session's (--all)
    return _peak_rss_mb([*base, *(["--all"] if what == "interventions" else [sid]),
                         "--what", what, "--format", fmt, "-o", str(out)])


TABLES = [f"{what}-{fmt}" for what in ("interventions", "alarms", "runs")
          for fmt in ("csv", "json", "jsonl", "md")]
HOWS = ("file", "tty", *TABLES, "report-md")  # a pipe: --how pipe


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--events", type=int, nargs="+", default=[1_000_000, 4_000_000])
    ap.add_argument("--keep", type=Path, help="keep the databases in this folder")
    ap.add_argument("--how", nargs="+", default=list(HOWS), choices=[*HOWS, "pipe"])
    ap.add_argument("--gen", choices=["mixed", "output"], default="mixed",
                    help="mixed: bench_replay's session (Batch writer); output: run.output rows")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="portside-bench-export-"))
    try:
        where = args.keep or tmp
        where.mkdir(parents=True, exist_ok=True)
        rss: dict[str, list[float]] = {h: [] for h in args.how}
        seen: dict[str, str] = {}  # the largest size's RSS along the way, per export
        for n in args.events:
            db = where / f"export-{args.gen}-{n}.db"
            sid = SID if args.gen == "output" else REPLAY_SID
            if not db.exists():
                t = time.perf_counter()
                make_session(db, n) if args.gen == "output" else make_mixed(db, n)
                print(f"{n:,} events generated in {time.perf_counter() - t:.1f} s "
                      f"({db.stat().st_size / n:.0f} DB bytes/event)", flush=True)
            for how in args.how:
                mb, wall = export_rss(db, sid, how, tmp / "out")
                rss[how].append(mb)
                seen[how] = along(SAMPLES)
                size = (tmp / "out").stat().st_size if (tmp / "out").exists() else 0
                print(f"  export {how:<18} {n:>11,} events: peak RSS {mb:6.1f} MB "
                      f"(along the way at 1/10, 1/2, 9/10: {seen[how]} MB) in {wall:6.1f} s"
                      + (f", {size / 2**20:,.1f} MB written" if size else ""), flush=True)
                (tmp / "out").unlink(missing_ok=True)
            if not args.keep:
                for f in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
                    f.unlink(missing_ok=True)
        load = os.getloadavg()
        for how in args.how:
            first, last = rss[how][0], rss[how][-1]
            print(f"TARGET export ({how}) in constant memory: peak RSS {first:.1f} MB at "
                  f"{args.events[0]:,} events, {last:.1f} MB at {args.events[-1]:,}: ratio "
                  f"{last / first:.2f} ({'met' if last / first <= 1.15 else 'NOT met'}); "
                  f"along the way at {args.events[-1]:,}: {seen[how]} MB; load average "
                  + " ".join(f"{x:.2f}" for x in load))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
