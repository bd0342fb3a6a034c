"""A file name that is not UTF-8 (any bytes but '/' and NUL, which a candidate can create in
its workspace) does not end the session: it is listed, diffed, exported and stored under an
escaped name, and the workspace's own copy of it keeps its bytes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_run import cli

from portside.core.log import events as ev
from portside.core.workspace.names import WorkspaceError, display_path, real_path
from portside.core.workspace.workspace import Workspace
from portside.store import Store

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "fixtures" / "trainers" / "train_tiny.py"
PY = sys.executable
BAD = b"\xff\xfebad.py"
MAKE_BAD = f"open({BAD!r}, 'wb').write(b'x = 1\\n')\n"


@pytest.mark.slow  # a whole session with real runs
def test_a_session_whose_candidate_makes_a_non_utf8_name_ends_normally(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    shutil.copy(TINY, project / "train.py")
    train = (project / "train.py").read_text(encoding="utf-8")
    script = tmp_path / "agent.jsonl"
    made = train.replace('if __name__ == "__main__":', MAKE_BAD + 'if __name__ == "__main__":')
    steps = [  # the candidate makes the name; the agent then lists, greps and edits it
        {"write": {"path": "train.py", "content": made, "rationale": "a name"}},
        {"run": "candidate"},
        {"list": ""},
        {"grep": "x = 1"},
        {"edit": {"path": "\\xff\\xfebad.py", "old": "x = 1", "new": "x = 2"}},
        {"claim": "Ported."},
    ]
    script.write_text("".join(json.dumps(s) + "\n" for s in steps))
    db = tmp_path / "s.db"
    res = cli("run", str(project), "--target", "cpu", "--agent", f"scripted:{script}",
              "--reference", f"{PY} train.py --steps 20", "--reference-runs", "1", "--headless",
              "--policy", "auto", "--json", "--stall", "30", db=db, timeout=600,
              env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "OMP_NUM_THREADS": "1"})
    assert "UnicodeEncodeError" not in res.stderr, res.stderr[-3000:]
    assert res.returncode in (0, 1), res.stderr[-3000:]
    data = json.loads(res.stdout)
    assert data["verdict"] in ("pass", "fail")
    with Store(db) as store:
        events = list(store.events(data["session"]))
    ended = [e for e in events if isinstance(e, ev.SessionEnded)]
    assert ended and "engine failed" not in ended[-1].reason
    applied = [e.path for e in events if isinstance(e, ev.EditApplied)]
    assert applied == ["train.py", "\\xff\\xfebad.py"]


@pytest.mark.parametrize("git", [False, True])
def test_non_utf8_names_round_trip_through_the_workspace(tmp_path: Path, git: bool) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "train.py").write_text("x = 0\n")
    if git:
        env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_AUTHOR_NAME": "t",
               "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@x"}
        for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "i"]):
            subprocess.run(["git", "-C", str(project), *args], check=True, env=env)
    ws = Workspace.create(project, tmp_path / "ws")
    (ws.root / os.fsdecode(BAD)).write_bytes(b"x = 1\n")
    (ws.root / "back\\slash.py").write_text("y = 1\n")  # a backslash is a name's byte too
    shown = "\\xff\\xfebad.py"
    assert display_path(os.fsdecode(BAD)) == shown and real_path(shown) == os.fsdecode(BAD)
    assert {c.path: c.status for c in ws.changes()} == {shown: "added",
                                                        "back\\\\slash.py": "added"}
    assert shown in ws.list_files() and ws.list_files("*bad.py") == [shown]
    assert ws.read_file(shown) == "x = 1\n"  # the shown name reads the file with those bytes
    assert ws.read_file("back\\\\slash.py") == "y = 1\n"
    assert [h.path for h in ws.grep("x = 1")] == [shown]
    patch = ws.diff_patch()
    assert '"b/\\377\\376bad.py"' in patch  # git's own quoting of the bytes
    edit = ws.propose_replace(shown, "x = 1", "x = 2")
    assert edit.path == shown and '"a/\\377\\376bad.py"' in edit.unified_diff()
    ws.apply(edit)
    target = tmp_path / "target"
    shutil.copytree(project, target)
    assert sorted(ws.write_back(target)) == sorted([shown, "back\\\\slash.py"])
    assert (target / os.fsdecode(BAD)).read_bytes() == b"x = 2\n"
    with pytest.raises(WorkspaceError, match="backslashes are not allowed"):
        ws.read_file("model\\train.py")
