"""The corpus's XLA:CPU cases (the candidates run in the torch_xla venv, the references on the
CPU): the drop_last + StepLR port and the xmp.spawn-style port pass, their planted failures are
flagged with the kind naming the cause. xmp.spawn runs one replica here (see xmp.py)."""

from __future__ import annotations

import pytest

from .cases import XLA_PYTHON
from .harness import run, table

pytestmark = [
    pytest.mark.xla, pytest.mark.slow, pytest.mark.timeout(3600),
    pytest.mark.skipif(not XLA_PYTHON.exists(), reason=f"no torch_xla venv at {XLA_PYTHON}"),
]


def test_xla_ports_pass_and_planted_failures_name_their_cause() -> None:
    rows, _ = run(parallel=2, xla=True)
    print("\n" + table(rows))
    bad = [r for r in rows if not r.ok]
    assert not bad, "\n" + table(bad) + "\n" + "\n".join(t for r in bad for t in r.titles)
    assert {r.case for r in rows} == {"steplr-xla", "xmp-xla", "manual-update-xla"}
    assert sum(r.expected == "pass" for r in rows) == 4 and len(rows) == 7
    (manual,) = [r for r in rows if r.case == "manual-update-xla"]
    assert not any(a.endswith("wrong-hardware") for a in manual.alarms), manual.titles
