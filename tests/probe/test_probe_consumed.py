"""Issue 37 items 3 and 5 in the probe: the batch a step consumed with no DataLoader (the
leading dimension of its loss's input, `consumed`, on the first steps), and the step's loss when
the last micro-batch's backward runs inside optimizer.step() (Lightning's accumulation)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ._util import ProbeRun, ground_truth, read_records, steps_of
from .test_probe_units import load

CORPUS = Path(__file__).resolve().parents[1] / "corpus"


def test_batch_indexed_from_tensors_is_the_loss_inputs_leading_dimension(
        probe_run: ProbeRun) -> None:
    _, out = probe_run(str(CORPUS / "index_batch.py"), "--epochs", "1", "--batch", "48")
    steps = steps_of(read_records(out))
    assert len(steps) == 1024 // 48
    assert [r.get("consumed") for r in steps[:16]] == [48] * 16  # no DataLoader: no samples
    assert all("consumed" not in r and "samples" not in r for r in steps[16:])


def test_closure_accumulation_keeps_the_whole_steps_loss_and_batch(probe_run: ProbeRun) -> None:
    proc, out = probe_run("closure_accum.py", "--steps", "20", "--accum", "4", "--batch", "8")
    steps = steps_of(read_records(out))
    gt = ground_truth(proc.stdout)
    assert len(steps) == len(gt) == 20
    for rec, (_, loss) in zip(steps, gt, strict=True):
        # before: only the last micro-batch's loss (the one inside step()), a quarter of it
        assert rec["loss"] == pytest.approx(float(loss), rel=1e-6)
        assert rec["backward_calls"] == 4
    assert [r.get("consumed") for r in steps[:16]] == [32] * 16


def test_consumed_reads_past_scalar_arithmetic_to_the_loss_input() -> None:
    torch = pytest.importorskip("torch")
    f = torch.nn.functional
    p = load()
    x = torch.randn(12, 5)
    w = torch.randn(5, 3, requires_grad=True)
    y = torch.randint(0, 3, (12,))
    assert p._consumed(f.cross_entropy(x @ w, y)) == 12
    assert p._consumed(f.cross_entropy(x @ w, y) / 4 * 2 + 0.5) == 12
    assert p._consumed(f.mse_loss(x @ w, torch.randn(12, 3))) == 12
    assert p._consumed(((x @ w) ** 2).mean()) == 12
    assert p._consumed(f.cross_entropy(x @ w, y, reduction="none").sum()) == 12
    # a loss over tokens consumes batch x sequence rows (so the checks never mix it with a
    # DataLoader's samples)
    assert p._consumed(f.cross_entropy((x @ w).view(-1, 1), torch.zeros(36, dtype=torch.long))
                       ) == 36


@pytest.mark.parametrize(("args", "name"), [((), "optimizer"), (("--trainer",),
                                                                   "trainer.optimizer")])
def test_an_optimizer_stepped_by_a_librarys_wrapper_is_named_by_the_scripts_variable(
        probe_run: ProbeRun, args: tuple[str, ...], name: str) -> None:
    # accelerate's AcceleratedOptimizer / the HF Trainer step it from their own frames: the
    # name was None there ("optimizer #0" on the card)
    _, out = probe_run("wrapped_opt_train.py", *args)
    (facts,) = [r for r in read_records(out) if r["type"] == "facts"]
    (opt,) = facts["optimizers"]
    assert opt["name"] == name and opt["modules"] == ["net"]
