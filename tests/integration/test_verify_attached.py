"""`portside verify --session ID` on a session `portside attach` recorded: the references run
on the user's tree as it was before the session, the candidate on the tree as it is now, and the
whole change is said, the card edits and what a command changed alike.

The attached session is a real `portside attach --headless --policy auto`; its hooks are
answered through the command hook it wrote into the project, run exactly as Claude Code runs it
(the hook's JSON on stdin), and the tool calls it allows are then carried out in the user's tree
by the test, as Claude Code would carry them out."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from cli_run import cli, cli_popen
from treehash import tree_hash

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "fixtures" / "trainers" / "train_tiny.py"
PY = sys.executable
REFERENCE = f"{PY} train.py --steps 6"
CLIP = 'p.add_argument("--max-norm", type=float, default=1.0)'
TIGHT = 'p.add_argument("--max-norm", type=float, default=0.05)'


def _hook(command: str, body: dict[str, Any]) -> dict[str, Any]:
    """One hook, as Claude Code runs a command hook: JSON on stdin, the answer on stdout."""
    proc = subprocess.run(command, shell=True, input=json.dumps(body).encode(),
                          capture_output=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return json.loads(proc.stdout or b"{}")  # type: ignore[no-any-return]


def _allowed(answer: dict[str, Any]) -> bool:
    return answer.get("hookSpecificOutput", {}).get("permissionDecision") == "allow"


def _attached_session(tmp: Path, project: Path, db: Path) -> str:
    """A real attach that saw a Write card (NOTES.md) and a Bash that changed train.py in place
    (no card shows that change); ended by the Claude Code session's end."""
    proc = cli_popen("attach", str(project), "--reference", REFERENCE, "--reference-runs", "1",
                     "--headless", "--policy", "auto", "--json", "--no-sandbox", db=db)
    settings = project / ".claude" / "settings.local.json"
    deadline = time.monotonic() + 120
    while "hook_client.py" not in (settings.read_text() if settings.exists() else ""):
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            pytest.fail("hooks never written: " + proc.communicate()[1][-2000:])
        time.sleep(0.1)
    command = json.loads(settings.read_text())["hooks"]["PreToolUse"][0]["hooks"][0]["command"]
    cwd = str(project)
    _hook(command, {"hook_event_name": "SessionStart", "session_id": "cc-1", "cwd": cwd,
                    "source": "startup"})
    write = {"file_path": str(project / "NOTES.md"), "content": "ported to XLA\n"}
    pre = {"hook_event_name": "PreToolUse", "session_id": "cc-1", "cwd": cwd,
           "tool_name": "Write", "tool_input": write, "tool_use_id": "w1"}
    assert _allowed(_hook(command, pre))
    (project / "NOTES.md").write_text(write["content"])
    _hook(command, {**pre, "hook_event_name": "PostToolUse", "tool_response": {"ok": True}})
    sed = {"command": "sed -i 's/max-norm\", type=float, default=1.0/max-norm\", type=float, "
                      "default=0.05/' train.py"}
    pre = {"hook_event_name": "PreToolUse", "session_id": "cc-1", "cwd": cwd,
           "tool_name": "Bash", "tool_input": sed, "tool_use_id": "b1"}
    assert _allowed(_hook(command, pre))
    subprocess.run(sed["command"], shell=True, cwd=project, check=True)
    _hook(command, {**pre, "hook_event_name": "PostToolUse", "tool_response": {"stdout": ""}})
    _hook(command, {"hook_event_name": "SessionEnd", "session_id": "cc-1", "cwd": cwd,
                    "reason": "exit"})
    out, err = proc.communicate(timeout=120)
    assert proc.returncode in (0, 1), err[-3000:]
    return str(json.loads(out)["session"])


@pytest.mark.heavy  # a whole attach (one reference run) then a verify (two runs): ~70 s loaded
def test_verify_session_judges_an_attached_sessions_whole_change(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    shutil.copy(TINY, project / "train.py")
    db = tmp_path / "s.db"
    sid = _attached_session(tmp_path, project, db)
    assert TIGHT in (project / "train.py").read_text()  # the command's change, in their tree
    assert not (project / ".claude").exists()  # attach took its hooks away again
    before = tree_hash(project)

    res = cli("verify", "--session", sid, "--reference", REFERENCE, "--target", "cpu",
              "--reference-runs", "1", "--json", db=db)
    assert res.returncode == 1, res.stderr[-3000:]  # tighter clipping: fail
    out = json.loads(res.stdout)
    # The reference ran on the tree before the session (max_norm 1.0), the candidate on the
    # tree after (0.05): only then is clipping changed.
    checks = {a["kind"] for a in out["alarms"]}
    assert "clipping-changed" in checks, out["alarms"]
    # The whole change: the card's new file and the command's edit no card showed.
    said = res.stderr.split("whole change since before the session", 1)[1]
    assert "A NOTES.md +1 -0" in said and "M train.py +1 -1" in said, res.stderr
    show = cli("export", out["session"], "--format", "jsonl", db=db)
    started = next(e for line in show.stdout.splitlines()
                   if (e := json.loads(line)).get("kind") == "session.started")
    assert started["meta"]["verifies"] == sid
    assert {c["path"]: c["status"] for c in started["meta"]["changed_files"]} == {
        "NOTES.md": "added", "train.py": "modified"}
    report = cli("export", out["session"], "--what", "report", db=db).stdout
    assert "## The change verified" in report
    assert "| `NOTES.md` | added | 1 | 0 |" in report and "| `train.py` | modified | 1 | 1 |" in report
    assert tree_hash(project) == before  # verify never wrote the user's tree
    assert CLIP not in (project / "train.py").read_text()
