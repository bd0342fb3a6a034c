"""Issue 40.1: a reference's key changes with what decides its result, and only with that.

Real parts: a git repository made with git, a virtual environment made with `python -m venv`
whose interpreter lists its own packages (a package is a dist-info folder in its
site-packages, as pip leaves one), this machine's devices.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from portside.core.run.runner import LocalExecutor
from portside.core.session.reference_reuse import ReferenceReuse


def _key(project: Path, command: str, env: dict[str, str], seed_offset: int = 0,
         cache: Path | None = None, stall_s: float | None = 1800.0) -> str:
    reuse = ReferenceReuse(project, None, cache_file=cache)
    parts = asyncio.run(reuse.parts(command, project, target="cpu", env=env, threads=0,
                                    patterns=[], timeout_s=None, stall_s=stall_s,
                                    executor=LocalExecutor()))
    assert parts is not None, reuse.why_not
    return parts.key(seed_offset)


def _git(project: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(project), "-c", "user.name=t", "-c", "user.email=t@t",
                    *args], check=True, capture_output=True)


def test_the_key_follows_what_decides_the_run(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text("print('train')\n")
    (project / ".gitignore").write_text("data/\n")
    (project / "data").mkdir()
    (project / "data" / "batch.bin").write_bytes(b"\0" * 10)
    _git(project, "init", "-q")
    _git(project, "add", ".")
    _git(project, "commit", "-q", "-m", "x")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    command = f"{venv}/bin/python train.py"
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "HF_TOKEN": "hf_" + "a" * 30,
           "TMUX_PANE": "%1", "BATCH": "64"}
    cache = tmp_path / "cache" / "interpreters.json"
    base = _key(project, command, env, cache=cache)
    assert cache.is_file()  # the interpreter's packages were listed once, and kept

    # The same: again; a rotated secret (the run never sees it); another terminal pane; an
    # ignored file (data, a run's checkpoint); from the cache, and without it.
    assert _key(project, command, env, cache=cache) == base
    assert _key(project, command, {**env, "HF_TOKEN": "hf_" + "b" * 30}, cache=cache) == base
    assert _key(project, command, {**env, "TMUX_PANE": "%7"}, cache=cache) == base
    # `verify` (stall 1800 s by default) and `run` (no stall limit) find each other's runs
    assert _key(project, command, env, cache=cache, stall_s=None) == base
    # a PATH naming a folder twice (a shell that prepended a venv again) resolves the same
    first = env["PATH"].split(os.pathsep)[0]
    assert _key(project, command, {**env, "PATH": f"{first}{os.pathsep}{env['PATH']}"},
                cache=cache) == base
    (project / "data" / "batch.bin").write_bytes(b"\1" * 10)
    assert _key(project, command, env, cache=cache) == base
    assert _key(project, command, env) == base

    # Another: seed offset, command, target-visible variable, a tracked file's content, a new
    # untracked file git does not ignore.
    assert _key(project, command, env, seed_offset=1) != base
    assert _key(project, command + " --lr 0.2", env, cache=cache) != base
    assert _key(project, command, {**env, "BATCH": "32"}, cache=cache) != base
    (project / "train.py").write_text("print('train!')\n")
    edited = _key(project, command, env, cache=cache)
    assert edited != base
    (project / "train.py").write_text("print('train')\n")
    assert _key(project, command, env, cache=cache) == base
    (project / "helper.py").write_text("X = 1\n")
    assert _key(project, command, env, cache=cache) != base
    (project / "helper.py").unlink()

    # A package installed into the interpreter's site-packages, then another version of it.
    dist = site / "fakepkg-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fakepkg\nVersion: 1.0\n")
    with_pkg = _key(project, command, env, cache=cache)
    assert with_pkg != base
    dist.rename(site / "fakepkg-1.1.dist-info")
    (site / "fakepkg-1.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: fakepkg\nVersion: 1.1\n")
    upgraded = _key(project, command, env, cache=cache)
    assert upgraded not in (base, with_pkg)
