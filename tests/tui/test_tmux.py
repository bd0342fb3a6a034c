"""A real terminal (tmux, 120×40): `portside run` on two tiny real training scripts, an alarm
appears on screen, the reviewer acknowledges it with a key, quits, and the DB has it (and the
quit as the session's end reason)."""

from __future__ import annotations

import os
import shlex
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "fixtures" / "trainers" / "train_tiny.py"

pytestmark = [
    pytest.mark.tmux,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]


# A socket of our own: another test run on the machine must not kill our server.
SOCKET = f"portside-test-{os.getpid()}"


def _tmux(*args: str) -> str:
    return subprocess.run(["tmux", "-L", SOCKET, *args], capture_output=True, text=True,
                          check=False).stdout


def _wait_for(text: str, session: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    screen = ""
    while time.monotonic() < deadline:
        screen = _tmux("capture-pane", "-p", "-t", session)
        if text in screen:
            return screen
        time.sleep(0.5)
    raise AssertionError(f"{text!r} did not appear within {timeout} s; screen:\n{screen}")


def test_alarm_acknowledged_in_a_real_terminal(tmp_path: Path) -> None:
    db = tmp_path / "tmux.db"
    py = shlex.quote(sys.executable)
    ref = f"{py} {shlex.quote(str(TINY))}"
    cand = f"{ref} --max-norm 0.05"
    cmd = (f"{py} -m portside.cli --db {shlex.quote(str(db))} run --reference {shlex.quote(ref)}"
           f" --candidate {shlex.quote(cand)} --target cpu --reference-runs 1 --stall 60")
    session = "portside"
    _tmux("kill-server")
    _tmux("new-session", "-d", "-s", session, "-x", "120", "-y", "40",
          f"sleep 1; cd {shlex.quote(str(tmp_path))} && TERM=xterm-256color {cmd}; sleep 30")
    # Detached sessions may start at the default size: pin 120×40 before the app starts.
    _tmux("set-option", "-t", session, "window-size", "manual")
    _tmux("resize-window", "-t", session, "-x", "120", "-y", "40")
    try:
        screen = _wait_for("clipping-changed", session, timeout=240)
        assert "portside" in screen.splitlines()[0]
        assert "\x1b" not in screen
        time.sleep(1.0)  # the alarm has been in front of the reviewer for a moment
        _tmux("send-keys", "-t", session, "k")
        _wait_for("1 interventions", session, timeout=30)  # the header counts it
        _tmux("send-keys", "-t", session, "q")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "portside" in _tmux("capture-pane", "-p", "-t",
                                                                    session).splitlines()[0:1][0]:
            time.sleep(0.5)
    finally:
        _tmux("kill-server")
    conn = sqlite3.connect(db)
    rows = conn.execute(
        "SELECT i.action, i.attention_started_at, i.decided_at, a.\"check\" FROM interventions i "
        "JOIN alarms a ON a.alarm_id = i.target_id").fetchall()
    assert len(rows) == 1
    action, started, decided, check = rows[0]
    assert action == "acknowledge-alarm" and check in ("clipping-changed", "numeric-drift")
    assert started <= decided and decided - started >= 0.5
    # `q` is the reviewer closing portside, recorded as the end reason (not a cancelled worker).
    assert conn.execute("SELECT verdict, reason FROM sessions").fetchone() == (
        "fail", "the reviewer closed portside")
