"""The probe through the training libraries themselves (issue 37.5), on the plain CPU: what a
step consumed is counted where the library's loop hands the batch over, not where the library
reads its DataLoader (accelerate reads one batch ahead). The libraries are the `thirdparty`
extra's pins; a test skips where its library is not installed."""

from __future__ import annotations

from pathlib import Path

import pytest

from ._util import ProbeRun, read_records, steps_of

CORPUS = Path(__file__).resolve().parents[1] / "corpus"

pytestmark = pytest.mark.slow  # a library import and a short training: about 10 s each


def _facts(records: list[dict]) -> dict:
    return [r for r in records if r["type"] == "facts"][-1]


def test_accelerate_read_ahead_counts_each_batch_at_the_step_that_takes_it(
        probe_run: ProbeRun) -> None:
    pytest.importorskip("accelerate")
    _, out = probe_run(str(CORPUS / "accelerate_train.py"), "--cpu", "--epochs", "2")
    records = read_records(out)
    steps = steps_of(records)
    assert len(steps) == 2 * 32
    # before: 64 at each epoch's first step (its DataLoaderShard reads the next batch before
    # it yields one), 0 at its last, and `batch` one ahead
    assert [r["samples"] for r in steps] == [32] * 64
    assert [(r["epoch"], r["batch"]) for r in steps] == [
        (e, b) for e in range(2) for b in range(1, 33)]
    assert {r["epoch_batches"] for r in steps} == {32}
    assert _facts(records)["data"]["batch_size"] == 32  # the DataLoader accelerate reads


def test_accelerate_accumulation_counts_the_micro_batches_of_the_step(
        probe_run: ProbeRun) -> None:
    pytest.importorskip("accelerate")
    _, out = probe_run(str(CORPUS / "accelerate_train.py"), "--cpu", "--epochs", "1",
                       "--accum", "2")
    steps = steps_of(read_records(out))
    assert len(steps) == 16
    assert [r["samples"] for r in steps] == [64] * 16
    assert [r["batch"] for r in steps] == list(range(2, 33, 2))


def test_lightning_loop_counts_each_batch_at_its_step(probe_run: ProbeRun) -> None:
    """Lightning's fit loop fetches through its own data fetcher; the counts were right
    before (kept here against a Lightning upgrade), and 16 x 2 accumulated is 32 a step."""
    pytest.importorskip("lightning")
    _, out = probe_run(str(CORPUS / "lightning_train.py"), "--batch", "16", "--accum", "2")
    steps = steps_of(read_records(out))
    assert len(steps) == 3 * 32
    assert [r["samples"] for r in steps] == [32] * 96
    assert [r["batch"] for r in steps[:32]] == list(range(2, 65, 2))
    assert {r["backward_calls"] for r in steps} == {2}
