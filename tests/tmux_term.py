"""A real terminal for the tests: tmux on a socket of this process's own (another test run on the
machine must not kill our server), a 120x40 window, its screen as text.

Used by tests/tui/test_tmux.py, test_tmux_demo.py and test_tmux_claude_code.py.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from pathlib import Path

SOCKET = f"portside-test-{os.getpid()}"


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", "-L", SOCKET, *args], capture_output=True, text=True,
                          check=False).stdout


def screen(session: str) -> str:
    return tmux("capture-pane", "-p", "-t", session)


def wait_for(text: str | tuple[str, ...], session: str, timeout: float) -> str:
    """The first screen holding every one of `text`: a capture can land between two of the
    app's frames, so one string seen is not yet the whole card."""
    wanted = (text,) if isinstance(text, str) else text
    deadline = time.monotonic() + timeout
    shown = ""
    while time.monotonic() < deadline:
        shown = screen(session)
        if all(t in shown for t in wanted):
            return shown
        time.sleep(0.2)
    missing = [t for t in wanted if t not in shown]
    raise AssertionError(f"{missing!r} did not appear within {timeout} s; screen:\n{shown}")


def start(session: str, cmd: str, cwd: Path, env: str = "") -> None:
    """``cmd`` in a new detached session of 120x40, in ``cwd`` with the variables ``env`` (shell
    assignments) added; the pane stays 30 s after it ends, so its last screen can be read."""
    tmux("new-session", "-d", "-s", session, "-x", "120", "-y", "40",
         f"sleep 1; cd {shlex.quote(str(cwd))} && {env} TERM=xterm-256color {cmd}; sleep 30")
    # Detached sessions may start at the default size: pin 120x40 before the app starts (the
    # pane's `sleep 1` lets the resize land).
    tmux("set-option", "-t", session, "window-size", "manual")
    tmux("resize-window", "-t", session, "-x", "120", "-y", "40")
