"""`portside verify --session` of an imported Claude Code session writes only inside its own
copies: a transcript whose Write/Edit paths lie outside the session's folder (absolute, or with
``..``) or lead out through a symlink in the tree is shown, never written. Through the real CLI
(`portside import --claude-code` then `portside verify --session`), with and without
``--before``; the outside files are hashed before and after."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

import pytest
from cc_transcript import CLIP, TIGHT, Session, text, tool
from cli_run import cli

from portside.core.log import events as ev
from portside.store import Store

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "fixtures" / "trainers" / "train_tiny.py"
PY = sys.executable
REF = f"{PY} train.py --steps 20"
VICTIM = "precious: the user's own file\n"
OTHER = "another outside file\n"
LINKED = "print('a file the session reached through a symlink')\n"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _hostile_session(project: Path, outside: Path, train: str) -> Session:
    """Tightens clipping in train.py (inside), and writes three files outside the folder: an
    absolute path, a path with ``..``, and one under a symlinked directory of the project."""
    s = Session(project)
    s.prompt("Port this project to TPU.")
    s.reply(tool("toolu_e", "Edit", file_path=f"{project}/train.py", old_string=CLIP,
                 new_string=TIGHT))
    s.wait(1)
    s.edit("toolu_e", "train.py", train, CLIP, TIGHT)
    victim = str(outside / "victim.txt")
    s.reply(tool("toolu_w1", "Write", file_path=victim, content=VICTIM))
    s.wait(1)
    s.result("toolu_w1", f"File created successfully at: {victim}", {
        "type": "create", "filePath": victim, "content": VICTIM, "structuredPatch": [],
        "originalFile": None})
    dotted = f"{project}/../{outside.name}/other.txt"
    s.reply(tool("toolu_w2", "Write", file_path=dotted, content=OTHER))
    s.wait(1)
    s.result("toolu_w2", f"File created successfully at: {dotted}", {
        "type": "create", "filePath": dotted, "content": OTHER, "structuredPatch": [],
        "originalFile": None})
    linked = f"{project}/data/loader.py"  # data -> ../outside: lexically inside
    s.reply(tool("toolu_w3", "Write", file_path=linked, content=LINKED))
    s.wait(1)
    s.result("toolu_w3", f"File created successfully at: {linked}", {
        "type": "create", "filePath": linked, "content": LINKED, "structuredPatch": [],
        "originalFile": None})
    s.reply(text("Done: the port is complete."))
    return s


def _setup(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    project, outside = tmp_path / "proj", tmp_path / "outside"
    project.mkdir()
    outside.mkdir()
    shutil.copy(TINY, project / "train.py")
    (project / "data").symlink_to("../outside")
    train = (project / "train.py").read_text(encoding="utf-8")
    pristine = tmp_path / "pristine"
    shutil.copytree(project, pristine, symlinks=True)
    s = _hostile_session(project, outside, train)
    transcript = s.write(tmp_path / f"{s.session_id}.jsonl")
    # The folder as Claude Code left it: its edit in place, the three files outside written.
    (project / "train.py").write_text(train.replace(CLIP, TIGHT), encoding="utf-8")
    (outside / "victim.txt").write_text(VICTIM)
    (outside / "other.txt").write_text(OTHER)
    (outside / "loader.py").write_text(LINKED)
    db = tmp_path / "p.db"
    res = cli("import", "--claude-code", str(transcript), "--as", "hostile", db=db)
    assert res.returncode == 0, res.stderr
    return project, outside, pristine, db


def _verified(db: Path) -> ev.SessionStarted:
    with Store(db) as store:
        sid = next(r["session_id"] for r in store.sessions() if r["session_id"] != "hostile")
        started = next(iter(store.events(sid)))
    assert isinstance(started, ev.SessionStarted)
    return started


@pytest.mark.parametrize("mode", ["tree", "before"])
def test_verify_never_writes_outside_its_copies(tmp_path: Path, mode: str) -> None:
    project, outside, pristine, db = _setup(tmp_path)
    hashes = {p.name: _sha(p) for p in outside.iterdir()}
    assert len(hashes) == 3
    where = ["--before", str(pristine)] if mode == "before" else []
    res = cli("verify", "--session", "hostile", *where, "--reference", REF, "--target", "cpu",
              "--reference-runs", "1", "--json", db=db, timeout=400)
    # The session's own edit is verified (clipping tightened: fail), the outside ones are not.
    assert res.returncode == 1, res.stderr[-3000:]
    assert json.loads(res.stdout)["verdict"] == "fail"
    assert {p.name: _sha(p) for p in outside.iterdir()} == hashes  # byte-identical
    started = _verified(db)
    assert started.meta["edited_files"] == ["train.py"]
    shown = started.meta["edits_outside_folder"]
    assert str(outside / "victim.txt") in shown and "data/loader.py" in shown
    assert any(p.endswith(f"../{outside.name}/other.txt") for p in shown), shown
    assert "not verified, outside the session's folder (never written)" in res.stderr
    assert str(outside / "victim.txt") in res.stderr  # the reviewer is told, by name
