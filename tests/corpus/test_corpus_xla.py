"""The corpus's XLA:CPU cases (the candidates run in the torch_xla venv, the references on the
CPU): the drop_last + StepLR port and the xmp.spawn-style port pass, their planted failures are
flagged with the kind naming the cause. xmp.spawn runs one replica here (see xmp.py)."""

from __future__ import annotations

import pytest

from .cases import CASES, XLA_PYTHON
from .harness import run, table

pytestmark = [
    pytest.mark.xla, pytest.mark.slow, pytest.mark.timeout(3600),
    pytest.mark.skipif(not XLA_PYTHON.exists(), reason=f"no torch_xla venv at {XLA_PYTHON}"),
]


def test_xla_ports_pass_and_planted_failures_name_their_cause() -> None:
    own_tests = ("spmd-xla", "accelerate-xla", "hf-trainer-xla", "lightning-xla")
    rows, _ = run([c.name for c in CASES if c.xla and c.name not in own_tests], parallel=2,
                  xla=True)
    print("\n" + table(rows))
    bad = [r for r in rows if not r.ok]
    assert not bad, "\n" + table(bad) + "\n" + "\n".join(t for r in bad for t in r.titles)
    assert {r.case for r in rows} == {"steplr-xla", "steplr-xla-mp", "xmp-xla",
                                      "manual-update-xla"}
    assert sum(r.expected == "pass" for r in rows) == 5 and len(rows) == 9
    (manual,) = [r for r in rows if r.case == "manual-update-xla"]
    assert not any(a.endswith("wrong-hardware") for a in manual.alarms), manual.titles


def test_spmd_port_is_judged_by_the_devices_its_step_computed_on() -> None:
    """Issue 37: one process driving a 4-device XLA:CPU mesh. Sharding the batch splits the
    step 4 ways and passes `[hardware] devices = 4` against the 4-rank DDP reference; never
    sharding it leaves every device computing the whole step: wrong-hardware, though the host
    has 4 devices (the facts' device_count, which alone passed it before)."""
    rows, _ = run(["spmd-xla"], parallel=2, xla=True)
    print("\n" + table(rows))
    assert len(rows) == 2
    bad = [r for r in rows if not r.ok]
    assert not bad, "\n" + table(bad) + "\n" + "\n".join(t for r in bad for t in r.titles)
    sharded, replicated = rows
    assert not any("hardware" in a for a in sharded.alarms), sharded.titles
    (title,) = [t for t in replicated.titles if "wrong-hardware" in t]
    assert "computed on 1 device(s), 4 expected" in title and "4 on the host" in title, title
    assert replicated.errors == ["wrong-hardware"], replicated.titles


def _has(python: str, module: str) -> bool:
    import subprocess

    return subprocess.run([python, "-c", f"import {module}"], capture_output=True).returncode == 0


@pytest.mark.parametrize(("case", "module"), [
    ("accelerate-xla", "accelerate"),  # HF accelerate 1.16
    ("hf-trainer-xla", "transformers"),  # the HF Trainer, transformers 5.25
    ("lightning-xla", "lightning"),  # Lightning 2.6: its XLA accelerator, single-device strategy
])
def test_library_ports_are_judged_through_the_real_library(case: str, module: str) -> None:
    """Issue 37.5, each library itself, ported to XLA:CPU: the correct port passes with no
    global-batch-changed beside it; a tightened clipping and an accumulation that doubles the
    batch without the lr are each named by their own kind, with no false
    global-batch-changed."""
    import sys

    if not (_has(sys.executable, module) and _has(str(XLA_PYTHON), module)):
        pytest.skip(f"{module} is not installed in both venvs (make venv / make xla-venv)")
    rows, _ = run([case], parallel=2, xla=True)
    print("\n" + table(rows))
    bad = [r for r in rows if not r.ok]
    assert len(rows) == 3 and not bad, "\n" + table(bad) + "\n" + "\n".join(
        t for r in bad for t in r.titles)
