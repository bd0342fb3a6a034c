"""A real terminal (tmux, 120×40) with a real Claude Code session: `portside run --agent
claude-code` (the CLI the SDK bundles, against a loopback Messages API). The Edit's diff card
appears while the workspace file is unchanged, `a` approves it, the file changes, the approval
is an intervention row in SQLite; the Bash call after it shows as a command card, not an edit."""

from __future__ import annotations

import os
import shlex
import shutil
import sqlite3
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("claude_agent_sdk", reason="the claude-code extra is not installed")

HERE = Path(__file__).resolve().parent
import tmux_term as term  # noqa: E402
from cli_run import cli_line  # noqa: E402
from loopback_api import MODEL, LoopbackAPI, text, tool, ws_of  # noqa: E402
from tiny_project import tiny_project  # noqa: E402

pytestmark = [
    pytest.mark.tmux,
    pytest.mark.slow,  # a real terminal, the whole app and its runs: tens of seconds each
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]

OLD, NEW = "import argparse\n", "import argparse  # ported by claude code\n"


def test_claude_code_edit_approved_in_a_real_terminal(tmp_path: Path) -> None:
    project = tiny_project(tmp_path / "tiny-project")
    db = tmp_path / "cc.db"
    done = threading.Event()

    def read(b: dict[str, Any]) -> list[dict[str, Any]]:
        return [tool("r1", "Read", {"file_path": f"{ws_of(b)}/train.py"})]

    def edit(b: dict[str, Any]) -> list[dict[str, Any]]:
        return [text("Marking the file as ported."),
                tool("e1", "Edit", {"file_path": f"{ws_of(b)}/train.py", "old_string": OLD,
                                    "new_string": NEW})]

    def bash(b: dict[str, Any]) -> list[dict[str, Any]]:
        return [tool("b1", "Bash", {"command": "ls -la", "description": "list the files"})]

    def wait(b: dict[str, Any]) -> list[dict[str, Any]]:
        done.wait(60)
        return [text("stopping")]

    with LoopbackAPI([read, edit, bash, wait, wait]) as api:
        env = " ".join(f"{k}={shlex.quote(v)}"
                       for k, v in api.claude_code_env(tmp_path / "claude-config").items())
        py = shlex.quote(sys.executable)
        cmd = cli_line("run", str(project), "--agent", f"claude-code:{MODEL}",
                       "--reference", f"{py} train.py", "--target", "cpu", "--reference-runs", "1",
                       "--stall", "60", db=db)
        session = f"cc-{os.getpid()}"
        term.tmux("kill-server")
        term.start(session, cmd, tmp_path, env)
        try:
            # The agent's own stream can name the new line before the card is drawn: wait
            # for the whole card (title, file, key hint) in one screen.
            term.wait_for(("ported by claude code", "edit 1 ", "train.py", "a approve"), session,
                      timeout=180)
            sid = sqlite3.connect(db).execute("SELECT session_id FROM sessions").fetchone()[0]
            ws = tmp_path / "work" / sid / "workspaces" / sid / "tree" / "train.py"
            assert OLD in ws.read_text() and NEW not in ws.read_text()  # shown before written
            time.sleep(0.5)  # the card has been in front of the reviewer for a moment
            term.tmux("send-keys", "-t", session, "a")
            term.wait_for("1 intervention", session, timeout=30)
            deadline = time.monotonic() + 30
            while NEW not in ws.read_text():
                assert time.monotonic() < deadline, "the approved edit never reached the file"
                time.sleep(0.2)
            # The Bash call: a command card, numbered apart from the edits.
            screen = term.wait_for(("command 1 ", "ls -la"), session, timeout=60)
            assert "edit 1 of 2" not in screen
            term.tmux("send-keys", "-t", session, "q")
            time.sleep(2)
        finally:
            done.set()
            term.tmux("kill-server")
    conn = sqlite3.connect(db)
    rows = conn.execute("SELECT action, target_id, attention_started_at, decided_at "
                        "FROM interventions").fetchall()
    proposed = [r[0] for r in conn.execute(
        "SELECT json_extract(body, '$.edit_id') FROM events WHERE kind = 'edit.proposed'")]
    assert len(rows) == 1 and rows[0][0] == "approve", rows
    assert [rows[0][1]] == proposed
    assert rows[0][2] <= rows[0][3]
    assert ws.read_text().count("# ported by claude code") == 1
