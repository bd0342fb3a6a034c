"""Issue 14 in the probe: steps without an optimizer, LBFGS closures, gradient accumulation,
scaler skips, epochs from the DataLoader, multi-process records. Ground truth is what the
script itself saw (GT lines) or what its arguments make it do."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ._util import ProbeRun, ground_truth, read_records, steps_of

CORPUS = Path(__file__).resolve().parents[1] / "corpus"


def test_hand_written_update_has_steps_loss_and_grad_norm(probe_run: ProbeRun) -> None:
    proc, out = probe_run("manual_update.py", "--steps", "30")
    records = read_records(out)
    steps = steps_of(records)
    gt = ground_truth(proc.stdout)
    assert len(steps) == len(gt) == 30  # before issue 14: no step at all, no file
    for (i, loss, norm), rec in zip(gt, steps, strict=True):
        assert rec["step"] == int(i) and rec["source"] == "backward" and rec["opt"] is None
        assert rec["loss"] == float(loss) and rec["grad_norm"] == float(norm)
        assert rec["max_norm"] == 0.5 and rec["backward_calls"] == 1 and rec["lr"] == []
    assert records[0]["type"] == "facts" and records[0]["param_devices"] == ["cpu"]
    assert records[-1]["type"] == "exit" and records[-1]["steps"] == 30


def test_clip_by_value_is_recorded(probe_run: ProbeRun) -> None:
    _, out = probe_run("manual_update.py", "--steps", "20", "--clip-value", "0.05")
    steps = steps_of(read_records(out))
    assert len(steps) == 20
    assert all(r["clip_value"] == 0.05 and r["max_norm"] is None for r in steps)


@pytest.mark.slow  # a real LBFGS run
def test_lbfgs_counts_one_step_per_optimizer_step(probe_run: ProbeRun) -> None:
    proc, out = probe_run(str(CORPUS / "lbfgs.py"), "--steps", "12", "--max-iter", "4")
    steps = steps_of(read_records(out))
    closures = int(ground_truth(proc.stdout, "CLOSURES")[0][0])
    assert len(steps) == 12 and closures > 12  # several backward passes per step
    assert sum(r["backward_calls"] for r in steps) == closures
    assert all(r["source"] == "optimizer" for r in steps)


@pytest.mark.slow  # a real accumulation run
def test_accumulation_sums_micro_batch_losses_and_counts_backward(probe_run: ProbeRun) -> None:
    proc, out = probe_run(str(CORPUS / "accum_amp.py"), "--gt", "--epochs", "2")
    steps = steps_of(read_records(out))
    gt = [float(x[0]) for x in ground_truth(proc.stdout)]
    assert len(steps) == len(gt) == 2 * (960 // 8 // 4)
    for rec, loss in zip(steps, gt, strict=True):
        assert rec["loss"] == pytest.approx(loss, rel=1e-6)
        assert rec["backward_calls"] == 4 and rec["samples"] == 32
        assert rec["epoch_batches"] == 960 // 8
    assert [r["epoch"] for r in steps] == [0] * 30 + [1] * 30
    assert [r["batch"] for r in steps[:3]] == [4, 8, 12]


@pytest.mark.slow  # a real GradScaler run
def test_scaler_skips_are_counted(probe_run: ProbeRun) -> None:
    proc, out = probe_run(str(CORPUS / "accum_amp.py"), "--gt", "--epochs", "1", "--accum", "1",
                          "--batch", "32", "--scaler", "--dtype", "float16",
                          "--init-scale", "16777216")
    steps = steps_of(read_records(out))
    skips = int(ground_truth(proc.stdout, "SKIPS")[0][0])
    assert skips > 0 and len(steps) == 960 // 32 - skips
    assert sum(r.get("skipped", 0) for r in steps) == skips


def test_epochs_from_dataloader_with_workers_and_drop_last(probe_run: ProbeRun) -> None:
    _, out = probe_run(str(CORPUS / "mnist_steplr.py"), "--epochs", "3", "--drop-last",
                       "--workers", "2")
    steps = steps_of(read_records(out))
    per = 1000 // 64  # drop_last: the short last batch is dropped
    assert len(steps) == 3 * per
    assert [r["epoch"] for r in steps] == [e for e in range(3) for _ in range(per)]
    assert [r["batch"] for r in steps[:per]] == list(range(1, per + 1))
    assert all(r["epoch_batches"] == per and r["samples"] == 64 for r in steps)
    # per-epoch StepLR: lr is gamma**epoch, the scheduler stepped once per epoch (+1 at init)
    assert [r["lr"][0] for r in steps[:: per]] == pytest.approx([1.0, 0.7, 0.49])
    assert [r["sched_steps"] for r in steps[:: per]] == [1, 2, 3]


def _torchrun(tmp_path: Path, probe_run: ProbeRun, *args: str) -> tuple[list[dict], list[dict]]:
    out = tmp_path / "probe.jsonl"
    env = probe_run.env(out)
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         str(CORPUS / "ddp.py"), "--epochs", "2", *args],
        env=env, capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.glob("probe*.jsonl")) == [
        "probe.jsonl", "probe.rank1.jsonl"]  # the launcher never steps: no file of its own
    return read_records(out), read_records(tmp_path / "probe.rank1.jsonl")


@pytest.mark.slow
def test_torchrun_ranks_ddp_and_hand_reduced(tmp_path: Path, probe_run: ProbeRun) -> None:
    (tmp_path / "ddp").mkdir()
    r0, r1 = _torchrun(tmp_path / "ddp", probe_run, "--mode", "ddp")
    s0, s1 = steps_of(r0), steps_of(r1)
    assert len(s0) == len(s1) == 2 * (1024 // 2 // 32)
    assert {r["rank"] for r in s0} == {0} and {r["rank"] for r in s1} == {1}
    facts = [r for r in r0 + r1 if r["type"] == "facts"]
    assert sorted(f["rank"] for f in facts) == [0, 1] and all(f["world_size"] == 2 for f in facts)
    assert all(r["ddp"] and r["clip_reduced"] for r in s0 + s1)
    sums0 = [r["param_sum"] for r in s0 if "param_sum" in r]
    assert sums0 and sums0 == [r["param_sum"] for r in s1 if "param_sum" in r]
    assert [r["grad_norm"] for r in s0] == [r["grad_norm"] for r in s1]  # reduced, then clipped

    (tmp_path / "before").mkdir()
    r0, r1 = _torchrun(tmp_path / "before", probe_run, "--mode", "allreduce", "--clip-before")
    s0, s1 = steps_of(r0), steps_of(r1)
    assert all(not r["ddp"] and r["clip_reduced"] is False for r in s0 + s1)
    assert all(r["reduce_calls"] == 4 for r in s0)  # one all_reduce per parameter tensor
    assert [r["grad_norm"] for r in s0] != [r["grad_norm"] for r in s1]  # each rank's own
