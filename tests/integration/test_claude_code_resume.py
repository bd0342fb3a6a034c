"""`portside run --resume` of a killed Claude Code session: the real CLI the SDK bundles, a
loopback Messages API, `portside run` in a subprocess that is SIGKILLed after an approved edit
reached the disk, then resumed. The conversation continues (the server is sent the turns from
before the kill), the applied edit is neither proposed nor applied again, the file is right and
the log is one gap-free sequence."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from cli_run import cli as portside  # cli: the Claude Code binary below
from cli_run import cli_popen

pytest.importorskip("claude_agent_sdk", reason="the claude-code extra is not installed "
                    "(pip install -e '.[claude-code]'; `make venv` does)")

from loopback_api import KEY, MODEL, LoopbackAPI, text, tool, ws_of
from test_claude_code import _project, _tree

from portside.core.log import events as ev

PY = sys.executable
OLD, NEW = "import argparse\n", "import argparse  # ported to XLA\n"  # OLD is not in NEW


@pytest.mark.slow  # two real claude CLI sessions with real runs
def test_resume_continues_the_conversation_and_never_reapplies(tmp_path: Path) -> None:
    import psutil

    from portside.store import Store

    project = _project(tmp_path)
    before = _tree(project)
    original = (project / "train.py").read_text()
    db = tmp_path / "s.db"
    reached, release = threading.Event(), threading.Event()
    resumed_bodies: list[dict[str, Any]] = []

    def read(b: dict[str, Any]) -> list[dict[str, Any]]:
        return [tool("r1", "Read", {"file_path": f"{ws_of(b)}/train.py"})]

    def edit(b: dict[str, Any]) -> list[dict[str, Any]]:
        return [text("Marking the port."),
                tool("e1", "Edit", {"file_path": f"{ws_of(b)}/train.py", "old_string": OLD,
                                    "new_string": NEW})]

    def hang(b: dict[str, Any]) -> list[dict[str, Any]]:
        # The edit's result is in this request: portside is killed while the model "thinks".
        reached.set()
        release.wait(120)
        return [text("(never delivered)")]

    def again_read(b: dict[str, Any]) -> list[dict[str, Any]]:
        resumed_bodies.append(b)
        return [tool("r2", "Read", {"file_path": f"{ws_of(b)}/train.py"})]

    def again_edit(b: dict[str, Any]) -> list[dict[str, Any]]:
        resumed_bodies.append(b)  # a model that asks for the same edit once more
        return [tool("e2", "Edit", {"file_path": f"{ws_of(b)}/train.py", "old_string": OLD,
                                    "new_string": NEW})]

    def claim(b: dict[str, Any]) -> list[dict[str, Any]]:
        resumed_bodies.append(b)
        return [text("Done: the port is complete.")]

    steps = [read, edit, hang, again_read, again_edit, claim, claim, claim, claim]
    with LoopbackAPI(steps) as api:
        env = {**os.environ, **api.claude_code_env(tmp_path / "claude-config")}
        log1 = (tmp_path / "first.log").open("wb")
        first = cli_popen("run", str(project), "--target", "cpu", "--agent",
                          f"claude-code:{MODEL}", "--reference", f"{PY} train.py",
                          "--reference-runs", "1", "--headless", "--policy", "auto",
                          "--stall", "60", db=db, env=env, stdout=log1,
                          stderr=subprocess.STDOUT, text=False)
        try:
            if not reached.wait(180):
                first.kill()
                pytest.fail("the edit's result never reached the model: "
                            + (tmp_path / "first.log").read_text(errors="replace")[-3000:])
            cli = [c for c in psutil.Process(first.pid).children(recursive=True)
                   if "claude" in " ".join(c.cmdline())]
            first.send_signal(signal.SIGKILL)
            first.wait(10)
            psutil.wait_procs(cli, timeout=20)  # Claude Code exits when its pipe closes
        finally:
            release.set()
            if first.poll() is None:
                first.kill()
        store = Store(db)
        sid = store.resolve_session("last")
        killed_log = list(store.events(sid))
        store.close()
        ws = tmp_path / "work" / sid / "workspaces" / sid / "tree"  # cli/drive.py: by the DB
        assert any(isinstance(e, ev.EditApplied) for e in killed_log), "no edit.applied before the kill"
        assert not any(isinstance(e, ev.SessionEnded) for e in killed_log)
        assert NEW in (ws / "train.py").read_text()
        prior_turns = len(api.conversation)

        res = portside("run", "--resume", sid, "--headless", "--json", db=db, env=env,
                       timeout=400)
        assert res.returncode in (0, 1), res.stderr[-3000:]
        assert not [e for e in api.errors if "script ran out" not in e], api.errors

    # The conversation resumed: the first request after the kill carries the turns before it
    # (the edit's tool_use and its result), and portside's note that it continues.
    assert resumed_bodies, "the resumed session never asked the model"
    first_resumed = json.dumps(resumed_bodies[0]["messages"])
    assert '"e1"' in first_resumed and "ported to XLA" in first_resumed and '"r1"' in first_resumed
    assert "interrupted and is continuing" in first_resumed
    assert len(api.conversation) > prior_turns
    # The second ask for the same edit was refused without a proposal, with the reason.
    from loopback_api import last_user_texts

    told = last_user_texts(resumed_bodies[2])
    assert "is there already" in told or "not found" in told.lower(), told

    store = Store(db)
    log = list(store.events(sid))
    store.close()
    proposed = [e for e in log if isinstance(e, ev.EditProposed)]
    applied = [e for e in log if isinstance(e, ev.EditApplied)]
    assert [(p.path, NEW in p.after) for p in proposed] == [("train.py", True)]
    assert [a.edit_id for a in applied] == [proposed[0].edit_id]
    # The file: the original with the one edit, once.
    assert (ws / "train.py").read_text() == original.replace(OLD, NEW, 1)
    # One log, no gap: the resumed engine appended after the killed one.
    assert [e.seq for e in log] == list(range(1, len(log) + 1))
    assert any(isinstance(e, ev.SessionState) and e.state == "resumed" for e in log)
    assert isinstance(log[-1], ev.SessionEnded)
    assert json.loads(res.stdout)["session"] == sid
    assert _tree(project) == before
    assert KEY.encode() not in db.read_bytes()
