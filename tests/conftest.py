"""Shared fixtures: a fresh SQLite store per test, the venv's python, repo paths."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "portside.db"


@pytest.fixture
def store(db_path: Path) -> Iterator[object]:
    from portside.store import Store

    s = Store(db_path)
    yield s
    s.close()
