"""SIGTERM (CI cancelling, `timeout`) and SIGHUP (closed terminal) end portside as Ctrl-C does
(issue 13): the runs and every process they started are killed, the session is ended with the
signal as its reason, the exit status is 128+N."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from cli_run import cli, cli_popen

from portside.core.log import events as ev
from portside.store import Store

PY = sys.executable

HANG = """
import os, subprocess, sys, time
# A setsid() child, and a double-forked one: both must die with the run.
kid = subprocess.Popen(["sleep", "3000"], start_new_session=True)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        open("grandchild.pid", "w").write(str(os.getpid()))
        time.sleep(3000)
    os._exit(0)
os.wait()
while not os.path.exists("grandchild.pid"):
    time.sleep(0.01)
open("pids.tmp", "w").write(f"{os.getpid()} {kid.pid} {open('grandchild.pid').read()}")
os.replace("pids.tmp", "pids")
print("training...", flush=True)
time.sleep(3000)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_signal_ends_the_session_and_kills_the_runs(tmp_path: Path, sig: int) -> None:
    (tmp_path / "hang.py").write_text(textwrap.dedent(HANG))
    db = tmp_path / "s.db"
    proc = cli_popen(
        "verify", "--reference", f"{PY} hang.py", "--candidate", f"{PY} hang.py",
        "--target", "cpu", "--reference-runs", "1", "--cwd", str(tmp_path), db=db,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "OMP_NUM_THREADS": "1"},
    )
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "pids").exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the run never started"
            time.sleep(0.05)
        pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
        assert all(psutil.pid_exists(p) for p in pids)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 128 + sig, err[-2000:]
        assert "interrupted" in err
        time.sleep(0.3)
        alive = [p for p in pids if psutil.pid_exists(p)
                 and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        assert alive == []  # the trainer, its setsid child and its double-forked grandchild
        with Store(db) as store:
            (info,) = store.sessions()
            sid = info["session_id"]
            ended = [e for e in store.events(sid) if isinstance(e, ev.SessionEnded)]
            finished = [e for e in store.events(sid) if isinstance(e, ev.RunFinished)]
        assert len(ended) == 1 and ended[0].verdict == "fail"
        assert signal.Signals(sig).name in ended[0].reason
        assert [f.outcome for f in finished] == ["aborted"]
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


TINY = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "trainers" / "train_tiny.py"


@pytest.mark.slow  # a real session signalled mid-run, then resumed
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_session_ended_by_a_signal_resumes(tmp_path: Path, sig: int) -> None:
    """Issue 24 item 11: a reboot's SIGTERM (or a closed terminal's SIGHUP) ends the session as
    `interrupted`, and `portside run --resume` continues it in the same log, with no gap; it
    was refused before ("already ended"), only a kill -9'd session resumed."""
    db, marker, pidfile = tmp_path / "s.db", tmp_path / "slept", tmp_path / "sleeper.pid"
    train = f"{PY} {TINY} --steps 20"
    # The first candidate run sleeps (the signal comes meanwhile); the resumed one trains.
    candidate = (f"if [ ! -e {marker} ]; then touch {marker}; echo $$ > {pidfile}; sleep 300; "
                 f"fi; {train}")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "OMP_NUM_THREADS": "1"}
    proc = cli_popen("verify", "--reference", train, "--candidate", candidate,
                     "--target", "cpu", "--reference-runs", "1", "--cwd", str(tmp_path),
                     db=db, env=env)
    try:
        deadline = time.monotonic() + 120
        while not (pidfile.exists() and pidfile.read_text().strip()):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the candidate never started"
            time.sleep(0.05)
        sleeper = int(pidfile.read_text())
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + sig, err[-2000:]
    assert not psutil.pid_exists(sleeper) or psutil.Process(sleeper).status() == "zombie"
    with Store(db) as store:
        (info,) = store.sessions()
        sid = info["session_id"]
        first = list(store.events(sid))
    (ended,) = [e for e in first if isinstance(e, ev.SessionEnded)]
    assert (ended.verdict, ended.outcome) == ("fail", "interrupted")
    assert signal.Signals(sig).name in ended.reason

    res = cli("run", "--resume", sid, "--headless", "--json", db=db, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads(res.stdout)["verdict"] == "pass"
    with Store(db) as store:
        events = list(store.events(sid))
        runs = store.runs(sid)
        assert store.session(sid)["verdict"] == "pass"
    assert events[:len(first)] == first  # the same log, continued
    assert [e.seq for e in events] == list(range(1, len(events) + 1))  # gap-free
    ends = [(e.verdict, e.outcome) for e in events if isinstance(e, ev.SessionEnded)]
    assert ends == [("fail", "interrupted"), ("pass", "passed")]
    refs = [r["outcome"] for r in runs if r["role"] == "reference"]
    cands = [r["outcome"] for r in runs if r["role"] == "candidate"]
    assert refs == ["passed"] and cands == ["aborted", "passed"]  # the reference not run again
    resumed = [e for e in events if isinstance(e, ev.SessionState) and e.state == "resumed"]
    assert len(resumed) == 1 and signal.Signals(sig).name in resumed[0].detail
    assert f"portside run --resume {sid}" in err  # the interrupted command said how
