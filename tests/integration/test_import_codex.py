"""`portside import --codex ROLLOUT.jsonl`: a rollout the real Codex CLI wrote (its app-server
driven here as a user's client would, every ask accepted, against tests/loopback_responses.py)
imported into a real store, then verified with `portside verify --session`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_run import cli
from codex_cli import CODEX, SKIP_REASON
from loopback_responses import LoopbackResponses, codex_home, message, patch, shell

from portside.core.codex.live import native_binary
from portside.core.log import events as ev

pytestmark = pytest.mark.skipif(CODEX is None, reason=SKIP_REASON)
REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "fixtures" / "trainers" / "train_tiny.py"
PY = sys.executable
KEY = "sk-proj-LOOPBACK0IMPORT0SECRET0123456789"
CLIP = '    p.add_argument("--max-norm", type=float, default=1.0)'
TIGHT = '    p.add_argument("--max-norm", type=float, default=0.05)'


def _rpc(proc: subprocess.Popen[str], msg: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write(json.dumps({"jsonrpc": "2.0", **msg}) + "\n")
    proc.stdin.flush()


def codex_session(tmp: Path, project: Path, steps: list[Any]) -> Path:
    """Run one Codex turn in ``project`` through its app-server, accepting every ask except
    patches whose diff holds "# xla"; the rollout file it wrote."""
    assert CODEX is not None
    bindir = tmp / "bin"
    bindir.mkdir()
    (bindir / "codex-linux-sandbox").symlink_to(native_binary(CODEX))
    with LoopbackResponses(steps, usage={"input": 500, "cached": 100, "output": 30}) as api:
        home = codex_home(tmp / "codex-home", api.url)
        env = {**os.environ, "CODEX_HOME": str(home), "LOOPBACK_OPENAI_KEY": KEY,
               "PATH": f"{bindir}:{os.environ['PATH']}"}
        proc = subprocess.Popen([CODEX, "app-server"], cwd=project, env=env, text=True,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL)
        assert proc.stdout is not None
        try:
            _rpc(proc, {"id": 1, "method": "initialize", "params": {"clientInfo": {
                "name": "test", "version": "1"}}})
            diffs: dict[str, str] = {}
            rollout = ""
            for line in proc.stdout:
                m = json.loads(line)
                if m.get("id") == 1 and "result" in m:
                    _rpc(proc, {"method": "initialized", "params": {}})
                    _rpc(proc, {"id": 2, "method": "thread/start", "params": {
                        "cwd": str(project), "approvalPolicy": "untrusted",
                        "sandbox": "workspace-write", "model": "gpt-5.5"}})
                elif m.get("id") == 2 and "result" in m:
                    rollout = m["result"]["thread"]["path"]
                    _rpc(proc, {"id": 3, "method": "turn/start", "params": {
                        "threadId": m["result"]["thread"]["id"],
                        "input": [{"type": "text", "text": "port train.py"}]}})
                elif m.get("method") == "item/started" and m["params"]["item"]["type"] \
                        == "fileChange":
                    item = m["params"]["item"]
                    diffs[item["id"]] = json.dumps(item["changes"])
                elif m.get("method", "").endswith("/requestApproval"):
                    no = "# xla" in diffs.get(m["params"].get("itemId", ""), "")
                    _rpc(proc, {"id": m["id"], "result": {
                        "decision": "decline" if no else "accept"}})
                elif m.get("method") == "turn/completed":
                    break
            assert not api.errors, api.errors
        finally:
            proc.terminate()
            proc.wait(10)
    assert rollout and Path(rollout).is_file()
    return Path(rollout)


def _steps() -> list[Any]:
    return [[message("Looking."), shell("echo training-ok")],
            [patch("*** Update File: train.py\n@@\n-import argparse\n+import argparse  # xla")],
            [patch(f"*** Update File: train.py\n@@\n-{CLIP}\n+{TIGHT}")],
            [message("Ported; all checks pass, numerics unchanged.")]]


@pytest.mark.slow  # two real trainer runs in verify --session (~40 s each, loaded machine)
@pytest.mark.heavy  # a whole real agent CLI session (make test-slow)
def test_codex_rollout_imported_and_verified(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    shutil.copy(TINY, project / "train.py")
    original = (project / "train.py").read_text()
    rollout = codex_session(tmp_path, project, _steps())
    assert TIGHT in (project / "train.py").read_text()  # Codex applied it, in the project
    db = tmp_path / "s.db"
    res = cli("import", "--codex", str(rollout), "--target", "cpu", db=db)
    assert res.returncode == 0, res.stderr
    from portside.store import Store

    store = Store(db)
    sid = store.resolve_session("last")
    events = list(store.events(sid))
    store.close()
    started = events[0]
    assert isinstance(started, ev.SessionStarted) and started.mode == "imported"
    assert started.meta["codex_thread"] in rollout.name and started.meta["cli_version"]
    assert started.meta["approval_policy"] == "untrusted"
    # The patch as a whole-file diff (the file as it was before, and after).
    edits = [e for e in events if isinstance(e, ev.EditProposed)]
    decided = {e.edit_id: e.decision for e in events if isinstance(e, ev.EditDecided)}
    applied = [e for e in edits if decided[e.edit_id] == "approved"]
    rejected = [e for e in edits if decided[e.edit_id] == "rejected"]
    assert [(e.before, e.after) for e in applied] == [(original, original.replace(CLIP, TIGHT))]
    assert len(rejected) == 1 and "# xla" in rejected[0].after \
        and rejected[0].before == original  # declined before the tightening
    commands = [e for e in events if isinstance(e, ev.CommandProposed)]
    assert len(commands) == 1 and "echo training-ok" in commands[0].command
    assert any(isinstance(e, ev.AgentToolResult) and "training-ok" in e.content for e in events)
    usage = [e for e in events if isinstance(e, ev.AgentUsage)]
    assert len(usage) == 4 and sum(u.cache_read_tokens for u in usage) == 400
    # Original timestamps: the rollout's own, not the import's.
    first = json.loads(rollout.read_text().splitlines()[0])["timestamp"]
    assert abs(started.ts - __import__("datetime").datetime.fromisoformat(
        first.replace("Z", "+00:00")).timestamp()) < 1e-3
    assert not any(isinstance(e, ev.Intervention) for e in events)
    assert KEY not in json.dumps([ev.to_builtins(e) for e in events])
    # verify --session: the tree before the session rebuilt, both run, the claim contradicted.
    res = cli("verify", "--session", sid, "--reference", f"{PY} train.py --steps 30",
              "--reference-runs", "1", "--target", "cpu", "--json", db=db, timeout=400)
    assert res.returncode == 1, res.stderr[-3000:]
    store = Store(db)
    verified = list(store.events(json.loads(res.stdout)["session"]))
    store.close()
    checks = {e.check for e in verified if isinstance(e, ev.AlarmRaised)}
    assert {"clipping-changed", "agent-claim-contradicted"} <= checks


def test_bad_rollout_names_file_and_line_and_writes_nothing(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    shutil.copy(TINY, project / "train.py")
    rollout = codex_session(tmp_path, project, [[message("Nothing to do.")]])
    lines = rollout.read_text().splitlines()
    db = tmp_path / "s.db"
    for n, bad in ((3, "{not json"), (2, json.dumps({"timestamp": 5, "type": "event_msg",
                                                      "payload": {}}))):
        broken = tmp_path / f"broken{n}.jsonl"
        broken.write_text("\n".join([*lines[:n - 1], bad, *lines[n:]]) + "\n")
        res = cli("import", "--codex", str(broken), db=db)
        assert res.returncode == 2, res.stderr
        assert f"{broken}:{n}:" in res.stderr
    res = cli("sessions", "--plain", db=db)
    assert "No sessions" in res.stdout, res.stdout
