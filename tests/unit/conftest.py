"""The unit tier is the one a developer runs after every edit (`make test-fast`): it starts no
process and imports no torch. Both are checked here, so a slow test cannot drift in unnoticed:
one that needs either belongs in tests/integration/."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest


class _NoProcess(subprocess.Popen):  # type: ignore[type-arg]
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"a unit test started a process ({args[0] if args else kwargs}): "
                             "it belongs in tests/integration/")


@pytest.fixture(autouse=True)
def _unit_tier(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    had_torch = "torch" in sys.modules
    monkeypatch.setattr(subprocess, "Popen", _NoProcess)
    yield
    if not had_torch and "torch" in sys.modules:
        raise AssertionError("a unit test imported torch: it belongs in tests/integration/")
