"""Verification on XLA:CPU: the candidate runs in the torch_xla venv, the references on the CPU.

target tpu without a TPU → wrong-hardware; changing batch shapes → recompilation; fixed shapes
with target xla:cpu → pass with no error alarm. The three candidates run concurrently (torch_xla
costs seconds per process to start).
"""

from __future__ import annotations

import asyncio
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
pytestmark = [
    pytest.mark.xla,
    pytest.mark.slow,  # torch_xla takes seconds to import in every process
    pytest.mark.skipif(not XLA_PYTHON.exists(), reason=f"no torch_xla venv at {XLA_PYTHON}"),
]
CRITERIA = parse_criteria('[goal]\nmetric = "accuracy"\npattern = \'accuracy=(?P<value>[0-9.]+)\'\n'
                          "tolerance = 2.0\n[compile]\nwarmup_steps = 3\n", "xla-test")
STEPS = "--steps 60"
SHAPES = "--batch-sizes 8,16,24,32,40,48,56,64"


def _verifier(tmp: Path, target: str, name: str) -> Verifier:
    return Verifier(EventBus(MemorySink()), f"xla-{name}", CRITERIA, target, tmp / name,
                    stall_s=240, timeout_s=600)


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    tmp = tmp_path_factory.mktemp("xla-verify")
    cpu = f"OMP_NUM_THREADS=1 {sys.executable} {TINY} {STEPS}"
    xla = f"OMP_NUM_THREADS=1 {XLA_PYTHON} {TINY} --device xla {STEPS}"
    cases = {
        "fixed": ("xla:cpu", f"PJRT_DEVICE=CPU {xla}", cpu),
        "shapes": ("xla:cpu", f"PJRT_DEVICE=CPU {xla} {SHAPES}", f"{cpu} {SHAPES}"),
        "silent-default": ("tpu", f"env -u PJRT_DEVICE {xla}", cpu),
    }

    async def one(name: str, target: str, cand: str, ref: str) -> object:
        v = _verifier(tmp, target, name)
        for _ in range(2):
            await v.run_reference(ref, tmp)
        return await v.run_candidate(cand, tmp)

    async def all_cases() -> list[object]:
        return await asyncio.gather(*(one(n, *c) for n, c in cases.items()))

    return dict(zip(cases, asyncio.run(all_cases()), strict=True))


def _errors(report: object) -> dict[str, str]:
    return {a.kind: a.title for a in report.alarms if a.is_error}  # type: ignore[attr-defined]


def test_fixed_shapes_on_xla_cpu_pass(reports: dict[str, object]) -> None:
    report = reports["fixed"]
    assert _errors(report) == {}, report.alarms  # type: ignore[attr-defined]
    assert report.outcome == "passed"  # type: ignore[attr-defined]
    assert report.summary["device"]["backend"] == "torch_xla"  # type: ignore[attr-defined]


def test_changing_shapes_raise_recompilation(reports: dict[str, object]) -> None:
    errors = _errors(reports["shapes"])
    assert "recompilation" in errors, reports["shapes"].alarms  # type: ignore[attr-defined]
    assert reports["shapes"].outcome == "failed-silent"  # type: ignore[attr-defined]


def test_target_tpu_without_tpu_is_wrong_hardware(reports: dict[str, object]) -> None:
    errors = _errors(reports["silent-default"])
    assert "wrong-hardware" in errors and "CPU" in errors["wrong-hardware"]
