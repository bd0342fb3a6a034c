"""The probe under torch_xla on XLA:CPU, launched with the XLA venv's python.

Create that venv with tests/xla/make_venv.sh (the Makefile does it for `make test-slow`). Every
training run of this module starts at once in one fixture: torch_xla costs seconds per process.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from portside.core.probe import _packed, inject_env

XLA_PYTHON = Path(
    os.environ.get("PORTSIDE_XLA_PYTHON")
    or Path.home() / ".cache" / "portside" / "xla-venv" / "bin" / "python"
)
SCRIPT = Path(__file__).parent / "scripts" / "train_xla.py"

pytestmark = [
    pytest.mark.xla,
    pytest.mark.slow,  # torch_xla takes seconds to import in every process
    pytest.mark.skipif(
        not XLA_PYTHON.exists(),
        reason=f"no torch_xla venv at {XLA_PYTHON}: run tests/xla/make_venv.sh "
        "or set PORTSIDE_XLA_PYTHON",
    ),
]

FIXED_STEPS = 50
SHAPES = [4, 4, 8, 8, 4, 2, 2, 8]  # new shapes at steps 0, 2 and 5
RUNS = {
    # name: (script args, PJRT_DEVICE or None for unset, probe on); "shapes" opts in to the
    # probe's own grad norm, the most intrusive mode (off by default on torch_xla)
    # 50 steps: past two periodic flushes, which the probe's background writer completes
    "fixed": (["--clip", "--opt", "adam", "--batches", ",".join(["8"] * FIXED_STEPS)], "CPU", True),
    "shapes": (["--batches", ",".join(map(str, SHAPES))], None, True),
    "shapes_bare": (["--batches", ",".join(map(str, SHAPES))], None, False),
    "mask": (["--mask", "--batches", "8,8,8"], "CPU", True),
    "zero_late": (["--zero-late", "--batches", "8,8,8"], "CPU", True),
    "manual": (["--opt", "none", "--batches", "8,8,8,8"], "CPU", True),
}


class Run:
    def __init__(self, proc: subprocess.Popen[str], out: Path) -> None:
        self.proc, self.out = proc, out
        self.stdout = self.stderr = ""

    def wait(self) -> Run:
        self.stdout, self.stderr = self.proc.communicate(timeout=600)
        assert self.proc.returncode == 0, self.stderr[-3000:]
        return self

    @property
    def records(self) -> list[dict]:
        if not self.out.exists():
            return []
        return [r for line in self.out.read_text().splitlines()
                for r in _packed.expand(json.loads(line))]

    def of(self, kind: str) -> list[dict]:
        return [r for r in self.records if r["type"] == kind]

    @property
    def compiles(self) -> int:
        return int(
            next(
                line.split()[1] for line in self.stdout.splitlines() if line.startswith("COMPILES")
            )
        )

    @property
    def gt(self) -> list[list[str]]:
        return [line.split()[1:] for line in self.stdout.splitlines() if line.startswith("GT ")]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    tmp = tmp_path_factory.mktemp("xla")
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PORTSIDE_", "PJRT_", "XLA_", "PT_XLA_")) and k != "PYTHONPATH"
    }
    started: dict[str, Run] = {}
    for name, (args, pjrt, probe) in RUNS.items():
        out = tmp / f"{name}.jsonl"
        env = inject_env(base, str(out)) if probe else dict(base)
        if pjrt:
            env["PJRT_DEVICE"] = pjrt
        if name == "shapes":
            env["PORTSIDE_PROBE_NORM_EVERY"] = "3"  # on XLA: every step, one graph
        proc = subprocess.Popen(
            [str(XLA_PYTHON), str(SCRIPT), *args],
            env=env,
            cwd=tmp,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        started[name] = Run(proc, out)
    return {name: run.wait() for name, run in started.items()}


def test_facts_real_hardware_pjrt_cpu(runs: dict[str, Run]) -> None:
    (facts,) = runs["fixed"].of("facts")
    assert facts["backend"] == "torch_xla"
    assert facts["device_kind"] == "CPU" and facts["real_devices"] == ["CPU:0"]
    assert facts["pjrt_device"] == "CPU" and facts["param_devices"] == ["xla:0"]
    assert facts["versions"]["torch_xla"].startswith("2.9")


def test_hand_written_update_gets_the_xla_device(runs: dict[str, Run]) -> None:
    # Issue 26: no torch.optim, the parameters updated by p.data.add_: the device facts come
    # from the parameters backward() reached, which were not found on torch 2.9 (facts said
    # backend cpu, param_devices [] and wrong-hardware followed).
    (facts,) = runs["manual"].of("facts")
    assert facts["backend"] == "torch_xla" and facts["device_kind"] == "CPU"
    assert facts["param_devices"] == ["xla:0"] and facts["loss_device"] == "xla:0"
    assert facts["real_devices"] == ["CPU:0"] and facts["optimizers"] == []
    steps = runs["manual"].of("step")
    assert [s["source"] for s in steps] == ["backward"] * 4
    assert [round(s["loss"], 6) for s in steps] == [round(float(g[1]), 6) for g in runs["manual"].gt]


def test_settings_facts_on_xla(runs: dict[str, Run]) -> None:
    (facts,) = runs["fixed"].of("facts")
    (opt,) = facts["optimizers"]  # train_xla.py: Adam(lr=1e-3) with torch's defaults
    assert opt["class"] == "Adam" and opt["modules"] == ["model"]
    assert opt["groups"][0]["settings"]["betas"] == [0.9, 0.999]
    assert opt["groups"][0]["settings"]["eps"] == 1e-08 and opt["params"] == 4
    assert facts["data"] is None  # no DataLoader
    prec = facts["precision"]
    assert prec["param_dtypes"] == ["torch.float32"] and prec["autocast"] == []
    assert "TF32" not in runs["fixed"].stderr  # reading it must not warn in the user's stderr


def test_facts_show_silent_cpu_default(runs: dict[str, Run]) -> None:
    (facts,) = runs["shapes"].of("facts")
    assert facts["pjrt_device"] is None  # nobody asked for a device ...
    assert facts["pjrt_device_runtime"] == "CPU"  # ... torch_xla defaulted, with a mere warning
    assert facts["device_kind"] == "CPU" and facts["real_devices"] == ["CPU:0"]


def test_values_match_ground_truth_through_xla_clip(runs: dict[str, Run]) -> None:
    # clip_grad_norm_ here is torch_xla's replacement, installed after the probe wrapped torch's
    steps = runs["fixed"].of("step")
    gt = runs["fixed"].gt
    assert len(steps) == len(gt) == FIXED_STEPS
    for i, (rec, (step, loss, norm)) in enumerate(zip(steps, gt, strict=True)):
        assert rec["step"] == int(step) == i  # in order, none lost or doubled
        assert rec["loss"] == float(loss) and rec["grad_norm"] == float(norm)
        assert rec["grad_norm_source"] == "clip" and rec["max_norm"] == 0.5


def test_fixed_shapes_compile_only_in_first_two_steps(runs: dict[str, Run]) -> None:
    compiles = [r["compiles"] for r in runs["fixed"].of("step")]
    assert compiles[0] >= 1
    assert all(c == compiles[1] for c in compiles[1:]), compiles
    assert runs["fixed"].compiles == compiles[-1]
    exit_rec = runs["fixed"].of("exit")[0]
    assert exit_rec["fallback_ops"] == {}  # the probe's own reads cause no CPU fallback


def test_compile_count_rises_exactly_at_new_shapes(runs: dict[str, Run]) -> None:
    steps = runs["shapes"].of("step")
    assert [r["step"] for r in steps] == list(range(len(SHAPES)))
    compiles = [r["compiles"] for r in steps]
    assert compiles[0] >= 1
    for i in range(1, len(SHAPES)):
        new_shape = SHAPES[i] not in SHAPES[:i]
        assert compiles[i] - compiles[i - 1] == (1 if new_shape else 0), (i, compiles)
        assert (steps[i]["compile_s"] > 0) == new_shape
    assert all(r["grad_norm_source"] == "probe" and r["grad_norm"] > 0 for r in steps)
    assert [r["loss"] for r in steps] == [float(g[1]) for g in runs["shapes"].gt]


def test_probe_norm_is_on_by_default_on_xla(runs: dict[str, Run]) -> None:
    # unclipped, nothing asked: the probe's own norm every 10th step, in a graph of its own
    steps = runs["mask"].of("step")
    assert [r["grad_norm_source"] for r in steps] == ["probe", None, None]
    assert steps[0]["grad_norm"] > 0 and steps[1]["grad_norm"] is None
    assert runs["mask"].of("facts")[0]["probe_norm"].startswith("every 10th step")
    assert runs["mask"].of("exit")[0]["probe_compiles"] == 1
    # ... and its compilation left out of what the probe reports
    assert runs["mask"].compiles == runs["mask"].of("exit")[0]["compiles"] + 1
    assert runs["shapes"].of("facts")[0]["probe_norm"] == "every step"


def test_gradients_freed_before_sync_get_no_norm_and_no_graph_change(
        runs: dict[str, Run]) -> None:
    # zero_grad() before torch_xla.sync(): the probe held only weak references, so the step
    # graph is the program's own (no extra compilation), and the norm is recorded as missed
    run = runs["zero_late"]
    steps = run.of("step")
    assert len(steps) == 3 and all(r["grad_norm"] is None for r in steps)
    exit_rec = run.of("exit")[0]
    assert exit_rec["probe_norm_missed"] == 1 and "probe_compiles" not in exit_rec
    assert run.compiles == exit_rec["compiles"] == steps[-1]["compiles"] == 1
    assert "freed or changed before torch_xla.sync()" in run.stderr


def test_probe_adds_zero_compilations(runs: dict[str, Run]) -> None:
    # the most intrusive case: the probe computes the grad norm itself inside the step graph
    assert runs["shapes_bare"].compiles == runs["shapes"].compiles
    assert runs["shapes_bare"].gt == runs["shapes"].gt  # and changes no value
    assert not runs["shapes_bare"].out.exists()


def test_boolean_mask_shows_nonzero_fallback(runs: dict[str, Run]) -> None:
    exit_rec = runs["mask"].of("exit")[0]
    assert "aten::nonzero" in exit_rec["fallback_ops"]
    assert exit_rec["fallback_ops"]["aten::nonzero"] >= 3
    assert exit_rec["steps"] == 3
