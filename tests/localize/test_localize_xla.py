"""CPU reference vs a torch_xla (XLA:CPU) candidate: a correct port agrees, a planted change is
found, and a model created on the device (other initial weights) is aligned, then agrees."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ._util import command, trace_all
from .test_localize_cpu import CASES

XLA_PYTHON = Path(
    os.environ.get("PORTSIDE_XLA_PYTHON")
    or Path.home() / ".cache" / "portside" / "xla-venv" / "bin" / "python"
)

pytestmark = [
    pytest.mark.xla,
    pytest.mark.slow,  # torch_xla takes seconds to import in every process
    pytest.mark.skipif(not XLA_PYTHON.exists(), reason=f"no torch_xla venv at {XLA_PYTHON}: run "
                       "tests/xla/make_venv.sh or set PORTSIDE_XLA_PYTHON"),
]


def xla(flags: str) -> str:
    return "PJRT_DEVICE=CPU " + command(f"--device xla {flags}", str(XLA_PYTHON))


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("localize-xla")
    return trace_all(tmp, command(""), {
        "port": xla(""),
        "lr": xla("--lr 0.1"),
        "on_device": xla("--init-on-device"),
        "bf16": xla("--bf16"),
        **{name: xla(flags) for name, (flags, _, _) in PLANTED.items()},
    })


# The CPU suite's planted cases (its other ones have XLA tests of their own above)
PLANTED = {name: CASES[name] for name in ("label_smoothing", "normalisation", "dropout",
                                          "activation", "layer", "clip", "weight_decay")}


@pytest.mark.parametrize("case", list(PLANTED))
def test_planted_case_is_localised_on_xla(results: dict, case: str) -> None:
    _, kind, name = PLANTED[case]
    d = results[case]["divergence"]
    assert (d["kind"], d["name"], d["step"]) == (kind, name, 0), d


def test_correct_port_agrees(results: dict) -> None:
    out = results["port"]
    assert out["divergence"]["kind"] == "none", out["divergence"]
    assert out["devices"] == {"reference": "cpu", "candidate": "xla:0"}
    assert out["weights"]["same_start"]  # created on the CPU, moved: the same weights
    # Every event matched: 6 initial weights, then per step 1 input, 8 module outputs, the
    # loss and 6 parameters x (gradient, clipped gradient, update).
    assert out["events_compared"] == 6 + 2 * (1 + 8 + 1 + 18)


def test_planted_learning_rate_is_an_update(results: dict) -> None:
    d = results["lr"]["divergence"]
    assert (d["kind"], d["name"], d["step"]) == ("update", "encoder.0.weight", 0)


def test_model_created_on_device_is_aligned_then_agrees(results: dict) -> None:
    out = results["on_device"]
    assert not out["weights"]["same_start"]  # XLA's RNG made other weights
    assert out["weights"]["alignment"]["aligned"]
    assert len(out["weights"]["alignment"]["differed"]) == 6
    assert out["divergence"]["kind"] == "none", out["divergence"]


def test_bf16_autocast_is_the_first_matmul_module(results: dict) -> None:
    d = results["bf16"]["divergence"]
    assert (d["kind"], d["name"]) == ("module", "encoder.0"), d
    assert d["reason"] == "dtype float32 vs bfloat16"


def test_xla_run_ended_after_the_traced_steps(results: dict) -> None:
    run = results["port"]["run"]
    assert run.exit_code == 0
    assert not any("STEPS_DONE" in line for line in run.tail)
    facts = [r for r in run.records if r.get("type") == "facts"]
    assert facts and facts[0]["backend"] == "torch_xla"
