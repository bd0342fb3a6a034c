"""The probe's own gradient norm on torch_xla (XLA:CPU), on by default for unclipped ports.

The port under test (tests/xla/scripts/train_gradnorm.py) never clips. `--opt adam --grad-scale 4`
plants a drift that only the gradient norm shows: gradients x4 and Adam, blind to their scale, so
the loss and learning-rate series are the reference's. The norm is a graph of the probe's own
launched after the step's sync: its compilations (one per set of gradient shapes) must be left
out of the counts the recompilation check reads. `--unfreeze-at` makes a correct port whose
gradient set changes after warm-up, so the probe compiles its graph a second time there.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from doubles import MemorySink

from portside.core.log.bus import EventBus
from portside.core.log.criteria import parse_criteria
from portside.core.probe import inject_env
from portside.core.session.verify import Verifier

from .test_xla import XLA_PYTHON, Run

SCRIPT = Path(__file__).parent / "scripts" / "train_gradnorm.py"
STEPS = 100
UNFREEZE_AT = 30
UNFREEZE = ["--unfreeze-at", str(UNFREEZE_AT)]
ADAM = ["--opt", "adam"]
pytestmark = [
    pytest.mark.xla,
    pytest.mark.slow,  # torch_xla takes seconds to import in every process
    pytest.mark.skipif(not XLA_PYTHON.exists(), reason=f"no torch_xla venv at {XLA_PYTHON}"),
]


def _base_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("PORTSIDE_", "PJRT_", "XLA_", "PT_XLA_")) and k != "PYTHONPATH"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """Direct runs: XLA without and with the probe (default settings), and the CPU ground truth."""
    tmp = tmp_path_factory.mktemp("xla-gn")
    cases = {  # name: (python, script args, probe on)
        "bare": (str(XLA_PYTHON), ["--device", "xla", *UNFREEZE], False),
        "probed": (str(XLA_PYTHON), ["--device", "xla", *UNFREEZE], True),
        "drift": (str(XLA_PYTHON), ["--device", "xla", *ADAM, "--grad-scale", "4"], True),
        "cpu": (sys.executable, ["--device", "cpu", *ADAM], False),
    }
    started = {}
    for name, (python, args, probe) in cases.items():
        out = tmp / f"{name}.jsonl"
        env = inject_env(_base_env(), str(out)) if probe else _base_env()
        env["PJRT_DEVICE"] = "CPU"
        proc = subprocess.Popen([python, str(SCRIPT), "--steps", str(STEPS), *args], env=env,
                                cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        started[name] = Run(proc, out)
    return {name: run.wait() for name, run in started.items()}


def _gn(run: Run) -> dict[int, float]:
    return {int(s): float(v) for s, v in
            (line.split()[1:] for line in run.stdout.splitlines() if line.startswith("GN "))}


def test_norm_recorded_by_default_every_tenth_step(runs: dict[str, Run]) -> None:
    (facts,) = runs["drift"].of("facts")
    assert facts["backend"] == "torch_xla" and "PORTSIDE_PROBE_NORM_EVERY" not in os.environ
    assert facts["probe_norm"].startswith("every 10th step")
    steps = runs["drift"].of("step")
    assert len(steps) == STEPS
    normed = [r["step"] for r in steps if r["grad_norm"] is not None]
    assert normed[:1] == [0] and len(normed) >= 8, normed  # stretched only if it were costly
    assert all(b - a >= 10 for a, b in zip(normed, normed[1:], strict=False)), normed
    assert all(r["grad_norm_source"] == ("probe" if r["step"] in normed else None)
               for r in steps)
    # Ground truth: the same step's norm computed eagerly on the CPU by the script itself,
    # times the planted scale.
    gt = _gn(runs["cpu"])
    for r in steps:
        if r["grad_norm"] is not None:
            assert r["grad_norm"] == pytest.approx(4 * gt[r["step"]], rel=1e-3), r["step"]
    assert runs["drift"].of("exit")[0].get("probe_norm_missed") is None


def test_probe_compile_is_its_own_and_left_out_of_counts(runs: dict[str, Run]) -> None:
    bare, probed = runs["bare"], runs["probed"]
    assert bare.gt == probed.gt  # the probe changes no value
    steps = probed.of("step")
    exit_rec = probed.of("exit")[0]
    # its norm graph compiled twice: at step 0, and at step 30 for the larger gradient set
    assert exit_rec["probe_compiles"] == 2
    # What the program itself counts includes the probe's graphs; what the probe reports (and
    # the recompilation check reads) is exactly the count of a run without the probe.
    assert probed.compiles == bare.compiles + 2
    assert exit_rec["compiles"] == steps[-1]["compiles"] == bare.compiles == 2
    compiles = [r["compiles"] for r in steps]
    assert compiles == [1] * UNFREEZE_AT + [2] * (STEPS - UNFREEZE_AT), compiles
    assert [r["step"] for r in steps if r["grad_norm"] is not None][:4] == [0, 10, 20, 30]


# --- through the verifier: CPU references, XLA:CPU candidates, default criteria ---------------


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    tmp = tmp_path_factory.mktemp("xla-gn-verify")
    criteria = parse_criteria("", "xla-grad-norm-test")  # the defaults (warmup_steps = 3)
    script = f"{SCRIPT} --steps {STEPS}"
    # Both sides with the probe's defaults: the CPU references' norm stride stretches on these
    # cheap steps (every 50th), the candidates' is every 10th; the drift check smooths both
    # over samples, not steps.
    ref = f"{sys.executable} {script} --device cpu"
    xla = f"PJRT_DEVICE=CPU {XLA_PYTHON} {script} --device xla"
    unfreeze = " ".join(UNFREEZE)
    # 800 steps for the drift case: a series with a value every 50th step needs a few hundred
    # steps before 10 of its values make a mean, and the references' stride stretches further
    # on a loaded machine (the probe keeps its norm's cost small): at 400 steps the slow tier
    # sometimes had too few reference values to judge, and no alarm at all.
    def longer(cmd: str) -> str:
        return cmd.replace(f"--steps {STEPS}", "--steps 800")

    cases = {  # name: (reference, candidate)
        "drift": (longer(f"{ref} --opt adam"), longer(f"{xla} --opt adam --grad-scale 4")),
        "correct": (f"{ref} {unfreeze}", f"{xla} {unfreeze}"),
    }

    async def one(name: str, ref: str, cand: str) -> object:
        v = Verifier(EventBus(MemorySink()), f"xla-gn-{name}", criteria, "xla:cpu", tmp / name,
                     stall_s=240, timeout_s=600)
        for _ in range(2):
            await v.run_reference(ref, tmp)
        return await v.run_candidate(cand, tmp)

    async def all_cases() -> list[object]:
        return await asyncio.gather(*(one(n, *c) for n, c in cases.items()))

    return dict(zip(cases, asyncio.run(all_cases()), strict=True))


def test_unclipped_grad_norm_drift_is_caught_by_default(reports: dict[str, object]) -> None:
    alarms = reports["drift"].alarms  # type: ignore[attr-defined]
    keys = {a.key for a in alarms if a.is_error}
    assert "numeric-drift:grad_norm" in keys, alarms
    assert keys == {"numeric-drift:grad_norm"}, alarms  # loss and lr alone would not have told


def test_correct_port_raises_no_recompilation(reports: dict[str, object]) -> None:
    # The program's graph compiled once more when it unfroze a layer: the one burst after
    # warm-up the check forgives (info). The probe's norm graph compiled again for the new
    # gradient set at the same step's sync: counted, it would be a second burst (error).
    alarms = reports["correct"].alarms  # type: ignore[attr-defined]
    assert not [a for a in alarms if a.is_error], alarms
    rec = [a for a in alarms if a.kind == "recompilation"]
    assert [a.key for a in rec] == ["recompilation:once"], rec
    assert rec[0].evidence.steps == [UNFREEZE_AT]
