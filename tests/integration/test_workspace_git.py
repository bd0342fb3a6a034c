"""portside's own git calls in a workspace never run what a candidate planted in its .git: a
core.fsmonitor command, clean/smudge/process filters, an include of another config, hooks,
a gitfile or commondir pointing at a repository the run made. Each planted program would touch
a marker file; after changes, diff, export and write-back every marker is still absent."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from test_workspace import git, make_git_project, make_project

from portside.core.workspace.names import WorkspaceError
from portside.core.workspace.workspace import Workspace


def _plant(ws: Workspace, markers: Path) -> list[Path]:
    """What a run inside the tree can write: its .git's config, hooks and attributes."""
    git_dir = ws.tree / ".git"
    marks = [markers / n for n in ("fsmonitor", "clean", "smudge", "process", "included",
                                   "hook", "textconv")]
    evil = markers / "evil.cfg"
    evil.write_text(f'[core]\n\tfsmonitor = "touch {marks[4]}; false"\n')
    with open(git_dir / "config", "a") as fh:
        fh.write(f'[core]\n\tfsmonitor = "touch {marks[0]}; false"\n'
                 f'[filter "evil"]\n\tclean = "touch {marks[1]}; cat"\n'
                 f'\tsmudge = "touch {marks[2]}; cat"\n\tprocess = "touch {marks[3]}"\n'
                 f'[diff "evil"]\n\ttextconv = "touch {marks[6]}; cat"\n'
                 f'[include]\n\tpath = {evil}\n')
    hooks = git_dir / "hooks"
    hooks.mkdir(exist_ok=True)
    for name in ("post-index-change", "pre-commit", "post-checkout", "reference-transaction"):
        (hooks / name).write_text(f"#!/bin/sh\ntouch {marks[5]}\n")
        (hooks / name).chmod(0o755)
    (ws.root / ".gitattributes").write_text("* filter=evil diff=evil\n")
    return marks


def _exercise(ws: Workspace, proj: Path, tmp_path: Path) -> None:
    ws.apply(ws.propose_replace("train.py", "1.0)", "0.5)"))
    (ws.root / "new.py").write_text("n = 1\n")
    assert {c.path for c in ws.changes()} >= {"train.py", "new.py"}
    assert "0.5)" in ws.diff_patch()
    ws.export_patch(tmp_path / "out.patch")
    target = tmp_path / "target"
    subprocess.run(["cp", "-a", str(proj), str(target)], check=True)
    ws.write_back(target, force=True, paths=["train.py"])


def test_planted_git_programs_never_run(tmp_path: Path) -> None:
    proj = make_git_project(tmp_path)
    ws = Workspace.create(proj, tmp_path / "ws")
    markers = tmp_path / "markers"
    markers.mkdir()
    try:
        assert ws.mode == "git"
        marks = _plant(ws, markers)
        _exercise(ws, proj, tmp_path)
        assert [m.name for m in marks if m.exists()] == []
    finally:
        ws.dispose()


@pytest.mark.parametrize("how", ["gitfile", "commondir", "nested"])
def test_a_git_dir_the_run_points_elsewhere_is_not_followed(tmp_path: Path, how: str) -> None:
    """The run replaces .git with a gitfile to its own repository, adds a commondir, or makes a
    .git in the project's folder of a larger repository (where discovery from the project's
    folder would find it first): portside's git reads only the workspace's own repository."""
    if how == "nested":
        repo = tmp_path / "repo"
        proj = make_project(repo)
        git(repo, "init", "-q")
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", "init")
    else:
        proj = make_git_project(tmp_path)
    ws = Workspace.create(proj, tmp_path / "ws")
    markers = tmp_path / "markers"
    markers.mkdir()
    mark = markers / "ran"
    evil = tmp_path / "evil.git"
    subprocess.run(["git", "init", "-q", "--bare", str(evil)], check=True,
                   env={**os.environ, "GIT_CONFIG_GLOBAL": os.devnull})
    with open(evil / "config", "a") as fh:
        fh.write(f'[core]\n\tfsmonitor = "touch {mark}; false"\n\tbare = false\n')
    try:
        git_dir = ws.tree / ".git"
        if how == "gitfile":
            os.rename(git_dir, tmp_path / "moved.git")
            git_dir.write_text(f"gitdir: {evil}\n")
        elif how == "commondir":
            (git_dir / "commondir").write_text(f"{evil}\n")
        else:
            assert ws.root != ws.tree  # the project is a subfolder of the repository
            subprocess.run(["cp", "-a", str(evil), str(ws.root / ".git")], check=True)
        try:
            ws.changes()
        except WorkspaceError as exc:
            assert how == "gitfile" and ".git" in str(exc)
        assert not mark.exists()
    finally:
        ws.dispose()
