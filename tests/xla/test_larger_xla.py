"""[larger] on XLA:CPU: the candidate passes at batch 64 with fixed shapes; its larger run at
one new batch size compiles that shape once, in warm-up (no alarm), while a larger run whose
batch changes every step compiles each new shape after warm-up: `recompilation` (an error) on
the larger run, its title naming the variables. Real torch_xla runs (PORTSIDE_XLA_PYTHON)."""

from __future__ import annotations

import asyncio
import dataclasses as dc
import os
import sys
from pathlib import Path

import pytest
from doubles import MemorySink

from portside.core.log.bus import EventBus
from portside.core.log.criteria import parse_criteria
from portside.core.session.verify import Verifier

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "fixtures" / "trainers" / "train_tiny.py"
XLA_PYTHON = Path(
    os.environ.get("PORTSIDE_XLA_PYTHON")
    or Path.home() / ".cache" / "portside" / "xla-venv" / "bin" / "python"
)
XLA = f"PJRT_DEVICE=CPU OMP_NUM_THREADS=1 {XLA_PYTHON} {TINY} --device xla --steps 30"
CRITERIA = parse_criteria(
    f'[compile]\nwarmup_steps = 2\n[larger]\ncommand = "{XLA} --batch-sizes {{sizes}}"\n'
    'sizes = "256"\nsteps = 6\n', "larger-xla")
pytestmark = [
    pytest.mark.xla,
    pytest.mark.skipif(not XLA_PYTHON.exists(), reason=f"no torch_xla venv at {XLA_PYTHON}"),
]


# Heavy: four real runs, three of them torch_xla processes (~20 s each to start on XLA:CPU).
@pytest.mark.heavy
def test_a_new_shape_compiles_once_a_shape_per_step_recompiles(tmp_path: Path) -> None:
    v = Verifier(EventBus(MemorySink()), "larger-xla", CRITERIA, "xla:cpu", tmp_path / "probe",
                 stall_s=240, timeout_s=600)

    async def go() -> tuple[object, object, object]:
        await v.run_reference(f"OMP_NUM_THREADS=1 {sys.executable} {TINY} --steps 30", tmp_path)
        cand = await v.run_candidate(XLA, tmp_path)
        one = await v.run_larger(cand, tmp_path)
        v.criteria = dc.replace(v.criteria, larger=dc.replace(
            v.criteria.larger, vars=(("sizes", "128,136,144,152,160,168"),)))
        each = await v.run_larger(cand, tmp_path)
        return cand, one, each

    cand, one, each = asyncio.run(go())
    assert cand.outcome == "passed", cand.alarms  # type: ignore[attr-defined]
    for big in (one, each):
        assert big.role == "larger" and big.result.exit_code == 0  # type: ignore[attr-defined]
        assert big.records.exit["reason"] == "max-steps"  # type: ignore[attr-defined]
        assert big.summary["steps"] == 6  # type: ignore[attr-defined]
    # one new shape: compiled before the warm-up ended, nothing after it
    assert one.outcome == "passed", one.alarms  # type: ignore[attr-defined]
    assert not [a for a in one.alarms if a.kind == "recompilation"]  # type: ignore[attr-defined]
    # a shape a step: each compiled anew after warm-up
    (rec,) = [a for a in each.alarms if a.kind == "recompilation"]  # type: ignore[attr-defined]
    assert rec.severity == "error" and each.outcome == "failed-silent"  # type: ignore[attr-defined]
    assert rec.title.startswith("at sizes=128,136,144,152,160,168: ")
    assert rec.evidence.recompiles >= 3 and rec.evidence.larger == {
        "sizes": "128,136,144,152,160,168"}
