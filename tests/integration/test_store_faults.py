"""The record never breaks silently under store faults (issue 13 item 4): a lock held past the
busy timeout is waited out (no seq gap, no traceback); a store that truly fails stops the runs
and `verify` exits non-zero with "recording failed" instead of hanging on a full pipe."""

from __future__ import annotations

import os
import signal
import sqlite3
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from cli_run import cli, cli_popen, small_files

from portside.core.log import events as ev
from portside.store import Store, StoreError
from portside.store.recorder import Recorder

TINY = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "trainers" / "train_tiny.py"


def _seqs(path: Path, sid: str) -> list[int]:
    conn = sqlite3.connect(path)
    try:
        return [r[0] for r in conn.execute(
            "SELECT seq FROM events WHERE session_id = ? ORDER BY seq", (sid,))]
    finally:
        conn.close()


def _hold_lock(path: Path, seconds: float) -> threading.Thread:
    ready = threading.Event()

    def hold() -> None:
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        ready.set()
        time.sleep(seconds)
        conn.execute("ROLLBACK")
        conn.close()

    t = threading.Thread(target=hold)
    t.start()
    ready.wait()
    return t


def test_lock_past_busy_timeout_is_retried_without_gap(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    Store(path).close()
    rec = Recorder(path, busy_timeout_s=0.1)
    rec.append_durable(ev.SessionStarted(session_id="s", project="/p", target="cpu"))
    holder = _hold_lock(path, 1.5)  # 15x the busy timeout
    for i in range(200):
        rec.append(ev.AgentText(session_id="s", text=f"line {i}"))
        time.sleep(0.005)
    rec.record_intervention(ev.Intervention(  # a durable append waits, it does not fail
        session_id="s", intervention_id="i1", action="note", steering=False,
        attention_started_at=1.0, decided_at=2.0))
    holder.join()
    rec.flush()
    rec.close()
    assert _seqs(path, "s") == list(range(1, 203))


def test_lock_past_patience_fails_cleanly_and_the_session_is_closed(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    with Store(path) as store:
        rec = store._recorder = Recorder(path, busy_timeout_s=0.1, patience_s=0.5)
        rec.append_durable(ev.SessionStarted(session_id="s", project="/p", target="cpu"))
        holder = _hold_lock(path, 2.0)
        rec.append(ev.AgentText(session_id="s", text="lost with the batch"))
        with pytest.raises(StoreError, match="recording failed: database is locked"):
            rec.flush()
        with pytest.raises(StoreError, match="recording failed"):
            rec.append(ev.AgentText(session_id="s", text="refused"))
        holder.join()
        assert store.end_failed_session("s", "recording failed: locked")
        seqs = _seqs(path, "s")
        assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) == 2  # no gap
        (ended,) = list(store.events("s", kinds=["session.ended"]))
        assert ended.reason == "recording failed: locked"


def test_verify_with_a_failing_store_stops_the_runs_and_exits(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    (tmp_path / "t.py").write_text(
        "import os, sys\n"
        f"open({str(pidfile)!r}, 'a').write(f'{{os.getpid()}}\\n')\n"
        "line = 'x' * 200\n"
        "while True:\n"  # prints until killed: it blocks for ever if nobody drains the pipe
        "    print(line)\n")
    cmd = f"{sys.executable} t.py"
    t0 = time.monotonic()
    try:
        out = cli("verify", "--reference", cmd, "--candidate", cmd, "--target", "cpu",
                  "--reference-runs", "1", db=tmp_path / "p.db", cwd=tmp_path, timeout=90,
                  preexec_fn=small_files)  # the DB may not grow past 2 MB
    finally:
        pids = [int(p) for p in pidfile.read_text().split()] if pidfile.exists() else []
        alive = [p for p in pids if psutil.pid_exists(p)
                 and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        for p in alive:
            os.kill(p, signal.SIGKILL)
    assert time.monotonic() - t0 < 60
    assert out.returncode == 3, out.stderr[-2000:]
    assert "recording failed" in out.stderr and "runs stopped" in out.stderr
    assert "Traceback" not in out.stderr
    assert pids and not alive
    with Store(tmp_path / "p.db") as store:  # what was committed is whole and gap-free
        assert store.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        (sid,) = [r["session_id"] for r in store.sessions()]
        seqs = _seqs(tmp_path / "p.db", sid)
        assert seqs == list(range(1, len(seqs) + 1))


@pytest.mark.parametrize("which", ["db", "db-wal-shm", "replaced"])
def test_database_deleted_during_verify_is_recording_failed(tmp_path: Path, which: str) -> None:
    """Issue 24 item 10: the file deleted (or replaced) while `verify` runs. SQLite goes on
    writing to the unlinked inode, so the session was lost while verify said pass, exit 0."""
    db = tmp_path / "p.db"
    started, go = tmp_path / "started", tmp_path / "go"
    (tmp_path / "wait.py").write_text(  # the reference waits for the test, then trains
        "import os, time\n"
        f"open({str(started)!r}, 'a').write('x')\n"
        f"while not os.path.exists({str(go)!r}):\n"
        "    print('waiting', flush=True)\n"
        "    time.sleep(0.05)\n")
    cmd = f"{sys.executable} wait.py && {sys.executable} {TINY} --steps 30"
    proc = cli_popen("verify", "--reference", cmd, "--candidate", cmd, "--target", "cpu",
                     "--reference-runs", "1", db=db, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        while not started.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the reference never started"
            time.sleep(0.05)
        time.sleep(0.3)  # a few output batches committed to the file before it goes
        names = {"db": [""], "db-wal-shm": ["", "-wal", "-shm"], "replaced": ["", "-wal", "-shm"]}[which]
        for suffix in names:
            os.remove(f"{db}{suffix}")
        if which == "replaced":
            Store(db).close()  # another, empty portside database at the same path
        go.touch()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        go.touch()
    assert proc.returncode == 3, (out, err[-2000:])
    assert "recording failed" in err and str(db) in err, err[-2000:]
    assert ("deleted" if which != "replaced" else "replaced") in err, err[-2000:]
    assert "Traceback" not in err and "verdict" not in out.lower()
    if which == "replaced":  # nothing of the lost session was written into the new file
        with Store(db) as store:
            assert store.sessions() == []
    else:
        assert not db.exists()  # no new, empty file with a dangling session.ended in it
