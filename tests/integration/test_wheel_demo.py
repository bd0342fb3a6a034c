"""`pip install` of a built wheel into a fresh venv, then `portside demo --headless --policy auto`
from a folder that is not the checkout: the demo's project, recorded agent and criteria are
package data (issue 41.3). Before, it exited 1 with "the demo files are not here"."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _source_copy(dst: Path) -> Path:
    """The checkout's files as git sees them (tracked + untracked-not-ignored), so building the
    wheel writes nothing into the checkout (setuptools builds in place: build/, *.egg-info)."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO,
                            capture_output=True, check=True).stdout.split(b"\0")
    for raw in filter(None, listed):
        src = REPO / os.fsdecode(raw)
        if src.is_file():
            (dst / os.fsdecode(raw)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / os.fsdecode(raw))
    return dst


def _venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    return path / "bin"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    src = _source_copy(tmp / "src")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                    str(tmp / "dist"), str(src)], check=True, capture_output=True, timeout=600)
    (whl,) = (tmp / "dist").glob("portside-*.whl")
    return whl


def _user_env(home: Path) -> dict[str, str]:
    """A user's shell: their own HOME (no torch_xla venv there: the candidate runs on the CPU),
    nothing of the test run's portside settings."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PORTSIDE_", "PYTHON", "VIRTUAL_ENV", "XDG_"))}
    home.mkdir(parents=True, exist_ok=True)
    return {**env, "HOME": str(home)}


def test_wheel_holds_the_demo(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for f in ("project/train.py", "project/data.py", "project/model.py", "agent.jsonl",
              "criteria.toml"):
        assert f"portside/demo/{f}" in names, f


def test_pip_install_then_demo_runs_headless(wheel: Path, tmp_path: Path) -> None:
    bin_ = _venv(tmp_path / "venv")
    # torch from the index the machine is configured with (these machines hold 2.13.0 CPU on
    # disk; anywhere else a CPU build is what a user of the demo would install).
    subprocess.run([str(bin_ / "pip"), "install", "-q", str(wheel), "torch==2.13.0"],
                   check=True, capture_output=True, timeout=900)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = _user_env(tmp_path / "home")
    p = subprocess.run([str(bin_ / "portside"), "--db", str(tmp_path / "p.db"), "demo",
                        "--headless", "--policy", "auto", "--json"], cwd=elsewhere, env=env,
                       capture_output=True, text=True, timeout=900)
    # --policy auto approves the recording's bad edit: the demo's verdict is a fail (exit 1),
    # found by the checks (not a missing file, not a reference that could not import torch).
    assert p.returncode == 1, p.stderr[-3000:]
    out = json.loads(p.stdout)
    kinds = {a["kind"] for a in out["alarms"]}
    assert "clipping-changed" in kinds, kinds
    assert "reference-failed" not in kinds, kinds
    assert out["verdict"] == "fail"
    # the project was copied out of site-packages (a sandboxed run hides its project and the
    # venv around it): never run in the installed package's folder
    started = next(line for line in p.stderr.splitlines() if "session started:" in line)
    assert f"session started: {tmp_path / 'home'}" in started, started
    assert "venv" not in started, started


def test_demo_without_torch_says_so_before_any_run(wheel: Path, tmp_path: Path) -> None:
    bin_ = _venv(tmp_path / "venv")
    subprocess.run([str(bin_ / "pip"), "install", "-q", str(wheel)], check=True,
                   capture_output=True, timeout=900)
    p = subprocess.run([str(bin_ / "portside"), "--db", str(tmp_path / "p.db"), "demo",
                        "--headless"], cwd=tmp_path, env=_user_env(tmp_path / "home"),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "torch is not installed" in p.stderr and "pip install torch" in p.stderr, p.stderr
