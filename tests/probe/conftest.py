from pathlib import Path

import pytest

from ._util import ProbeRun


@pytest.fixture
def probe_run(tmp_path: Path) -> ProbeRun:
    return ProbeRun(tmp_path)
