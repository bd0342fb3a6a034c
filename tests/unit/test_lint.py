"""The tree stays ruff-clean (configuration in pyproject.toml) and mypy-clean on the packages."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MYPY_PACKAGES = ("core", "store", "tui", "cli")  # as `make lint` runs it


def test_ruff_clean() -> None:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed")
    res = subprocess.run([ruff, "check", "--no-cache", "core", "store", "tui", "cli", "tests"],
                         cwd=REPO, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_types_check_on_core_store_tui_and_cli() -> None:
    mypy = shutil.which("mypy", path=str(Path(sys.executable).parent))
    if mypy is None:
        pytest.skip("mypy is not installed (pip install -e '.[dev]')")
    res = subprocess.run([mypy, *MYPY_PACKAGES, "--explicit-package-bases"], cwd=REPO,
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_make_lint_types_the_same_packages() -> None:
    makefile = (REPO / "Makefile").read_text()
    assert f"mypy {' '.join(MYPY_PACKAGES)} --explicit-package-bases" in makefile
