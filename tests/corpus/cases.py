"""The corpus: correct ports and planted silent failures, in the style of widely used training
scripts (written here; synthetic data, tiny models). Each case: a reference command, candidates
with what the verdict must be — "pass" (no error alarm against three reference seeds) or the
alarm kind that names the planted cause."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
XLA_PYTHON = Path(os.environ.get("PORTSIDE_XLA_PYTHON")
                  or Path.home() / ".cache" / "portside" / "xla-venv" / "bin" / "python")

ACCURACY = """
[goal]
metric = "accuracy"
pattern = 'accuracy (?P<value>[0-9.]+)'
direction = "max"
tolerance = 0.02
"""
FINAL_LOSS = """
[goal]
metric = "final_loss"
pattern = 'final_loss (?P<value>[0-9.eE+-]+)'
direction = "min"
rtol = 0.05
"""


def _python(py: str, nproc: int = 0) -> str:
    return py


def _torchrun(py: str, nproc: int = 0) -> str:
    return f"{py} -m torch.distributed.run --standalone --nproc_per_node {nproc or 2}"


def _xla_cpu(py: str, nproc: int = 0) -> str:
    """The candidate as a torch_xla port on XLA:CPU, in the torch_xla venv."""
    return f"PJRT_DEVICE=CPU OMP_NUM_THREADS=1 {XLA_PYTHON}"


def _torchrun4(py: str, nproc: int = 0) -> str:
    return _torchrun(py, nproc or 4)


def _xla_spmd4(py: str, nproc: int = 0) -> str:
    """One process driving 4 XLA:CPU devices (an SPMD mesh)."""
    return f"CPU_NUM_DEVICES=4 {_xla_cpu(py, nproc)}"


@dataclass(frozen=True)
class Case:
    name: str
    script: str
    reference: str
    # (label, flags, expected) or (label, flags, expected, processes for the launcher)
    candidates: tuple[tuple[str, str, str] | tuple[str, str, str, int], ...]
    criteria: str = ACCURACY
    launcher: Callable[[str, int], str] = _python
    cwd: Path = HERE
    # XLA:CPU variants: the candidates run by another launcher (the torch_xla venv), maybe
    # another script, judged for another target; the references stay on the CPU.
    candidate_launcher: Callable[[str, int], str] | None = None
    candidate_script: str = ""
    target: str = "cpu"

    @property
    def xla(self) -> bool:
        return self.target.startswith("xla")


AMP = "--accum 1 --batch 32"
SGD = "--mode ddp --momentum 0"
FP16 = f"{AMP} --scaler --dtype float16 --init-scale 16777216"

CASES: tuple[Case, ...] = (
    Case("steplr", "mnist_steplr.py", "", (
        ("drop_last", "--drop-last", "pass"),
        ("drop_last+workers", "--drop-last --workers 2", "pass"),
        ("drop_last,no schedule", "--drop-last --no-sched", "lr-schedule-changed"),
        ("other gamma", "--gamma 0.5", "lr-schedule-changed"),
        ("weight decay added", "--weight-decay 0.05", "optimizer-changed !clipping-changed"),
        ("shuffle off", "--no-shuffle", "data-changed"),
        ("bf16 autocast", "--autocast", "precision-changed"),
    )),
    Case("onecycle", "schedules.py", "--sched onecycle", (
        ("drop_last", "--sched onecycle --drop-last", "pass"),
        ("other max_lr", "--sched onecycle --lr 1e-3", "lr-schedule-changed"),
    )),
    Case("cosine-warmup", "schedules.py", "--sched cosine", (
        ("drop_last", "--sched cosine --drop-last", "pass"),
        ("warmup removed", "--sched cosine --warmup 0", "lr-schedule-changed"),
    )),
    Case("plateau", "schedules.py", "--sched plateau", (
        ("drop_last", "--sched plateau --drop-last", "pass"),
        ("other factor", "--sched plateau --factor 0.1", "lr-schedule-changed"),
    )),
    Case("accumulation", "accum_amp.py", "", (
        ("2x16 for 4x8", "--accum 2 --batch 16", "pass"),
        ("loss not divided", "--no-divide", "numeric-drift"),
        ("clip per micro-batch", "--clip-micro", "clipping-changed"),
        ("momentum 0.5", "--momentum 0.5", "optimizer-changed"),
    )),
    Case("amp-scaler", "accum_amp.py", FP16, (
        ("bf16, no scaler", AMP, "pass"),
        ("clip before unscale", f"{FP16} --no-unscale", "numeric-drift !global-batch-changed"),
    )),
    Case("manual-update", "manual_lm.py", "", (
        ("another seed", "--seed 99", "pass"),
        ("tightened clip", "--clip 0.1", "clipping-changed"),
    ), criteria=FINAL_LOSS),
    Case("lbfgs", "lbfgs.py", "", (
        ("another seed", "--seed 7", "pass"),
        ("other lr", "--lr 0.4", "lr-schedule-changed"),
        ("history_size 5", "--history 5", "optimizer-changed"),
    ), criteria=FINAL_LOSS),
    # Two Adam optimizers, matched by the parameters they train, not by creation order.
    Case("gan", "gan.py", "", (
        ("optimizers made the other way round", "--swap", "pass"),
        ("generator betas default", "--g-beta1 0.9", "optimizer-changed"),
        ("discriminator weight decay", "--d-weight-decay 0.01", "optimizer-changed"),
    ), criteria=FINAL_LOSS),
    Case("ddp-torchrun", "ddp.py", "--mode ddp", (
        ("all_reduce, then clip", "--mode allreduce", "pass"),
        ("clip before all_reduce", "--mode allreduce --clip-before", "clipping-changed"),
        ("never reduced", "--mode noreduce", "ranks-diverged !clipping-changed"),
        ("gradients summed", "--mode allreduce --no-average", "rank-averaging-changed"),
        ("loss x world size", "--loss-times-world", "rank-averaging-changed"),
    ), launcher=_torchrun),
    # Global batch 64 = 2 ranks x 32 in the reference. Plain SGD: there the linear rule is
    # close to exact (with momentum 0.9 the scaled ports drifted in loss and lost accuracy).
    Case("ddp-batch", "ddp.py", f"{SGD} --lr 0.2", (
        ("1 rank x 64", f"{SGD} --lr 0.2 --batch 64", "pass", 1),
        ("1 rank x 32, lr halved", f"{SGD} --lr 0.1", "pass", 1),
        ("1 rank x 32, same lr", f"{SGD} --lr 0.2", "global-batch-changed", 1),
        ("2 ranks x 64, same lr", f"{SGD} --lr 0.2 --batch 64", "global-batch-changed"),
        ("2 ranks x 64, lr doubled", f"{SGD} --lr 0.4 --batch 64", "pass"),
    ), launcher=_torchrun),
    # No DataLoader: the batch is indexed out of tensors (issue 37 item 3); 2 ranks x 32.
    Case("index-batch", "index_batch.py", "", (
        ("1 process x 64", "--batch 64", "pass", 1),
        ("1 process x 32, same lr", "--batch 32", "global-batch-changed", 1),
    ), launcher=_torchrun),
    # XLA:CPU ports (tests marked `xla`), at the example's lr 1.0: torch_xla folds the scalars
    # 0 and 1 into the graph, so StepLR's first step away from 1.0 compiles the step graph once
    # more (step 15); the recompilation check explains it (info), it is not an error.
    Case("steplr-xla", "mnist_steplr.py", "", (
        ("xla, drop_last", "--device xla --drop-last", "pass"),
        ("xla, drop_last, no schedule", "--device xla --drop-last --no-sched",
         "lr-schedule-changed"),
        # the short last batch compiles once, then is cached: reported (info), not judged
        ("xla, no drop_last", "--device xla", "pass"),
        ("xla, drop_last, max_norm 0.5", "--device xla --drop-last --max-norm 0.5",
         "clipping-changed"),
    ), candidate_launcher=_xla_cpu, target="xla:cpu"),
    # Fed by torch_xla's MpDeviceLoader (issue 37 item 5): its thread reads the DataLoader
    # ahead in bursts (a whole epoch here); the batches count when the loop takes them.
    Case("steplr-xla-mp", "mnist_steplr.py", "", (
        ("xla, MpDeviceLoader", "--device xla --drop-last --mp-loader", "pass"),
        ("xla, MpDeviceLoader, batch 32", "--device xla --drop-last --mp-loader --batch 32",
         "global-batch-changed"),
    ), candidate_launcher=_xla_cpu, target="xla:cpu"),
    # A hand-written update (no torch.optim) ported to torch_xla: the device is the one its
    # parameters and loss are on (issue 26: it was taken for plain CPU).
    Case("manual-update-xla", "manual_lm.py", "", (
        ("xla, hand-written update", "--device xla", "pass"),
    ), criteria=FINAL_LOSS, candidate_launcher=_xla_cpu, target="xla:cpu"),
    # xmp.spawn style; one replica on XLA:CPU (see xmp.py): 1 x 64 is the 2 x 32 reference.
    Case("xmp-xla", "ddp.py", "--mode ddp", (
        ("1 replica x 64", "--batch 64", "pass"),
        ("1 replica x 32, same lr", "--batch 32", "global-batch-changed"),
    ), launcher=_torchrun, candidate_launcher=_xla_cpu, candidate_script="xmp.py",
        target="xla:cpu"),
    # "Four chips" (issue 37): the SPMD port of the 4-rank DDP reference splits its batch over
    # a 4-device mesh; the one that never shards it computes the whole step on every device,
    # one device's work, on a host that has 4.
    # Lightning's Trainer itself (issue 37.5): with accumulate_grad_batches its last
    # micro-batch's backward runs inside optimizer.step(closure); the split-batch port is the
    # reference's global batch, and its step's loss must be the step's, not 1/k of it.
    Case("lightning", "lightning_train.py", "", (
        ("lightning 16 x 2 accumulated", "--batch 16 --accum 2", "pass !global-batch-changed"),
        ("lightning gradient_clip_val 0.1", "--clip 0.1", "clipping-changed"),
    )),
    # Lightning on torch_xla: its XLA accelerator and single-device XLA strategy on XLA:CPU,
    # wrong ports through the Trainer's own configuration. That strategy moves each batch itself
    # (no MpDeviceLoader): these rows passed on 5412c74 too. Its XLAStrategy (MpDeviceLoader,
    # xmp.spawn) refuses one device under PJRT, and its two XLA:CPU replicas deadlock in the
    # first all-reduce as xmp.py's do (torch_xla 2.9): not a row here.
    Case("lightning-xla", "lightning_train.py", "", (
        ("lightning on xla", "", "pass !global-batch-changed"),
        ("lightning on xla, gradient_clip_val 0.1", "--clip 0.1",
         "clipping-changed !global-batch-changed"),
        ("lightning on xla, accumulate_grad_batches 2, same lr", "--accum 2",
         "global-batch-changed"),
    ), candidate_launcher=_xla_cpu, target="xla:cpu"),
    # HF accelerate itself (issue 37.5): its prepared DataLoader reads one batch ahead, its
    # AcceleratedOptimizer wraps the optimizer, its clip_grad_norm_ and accumulate() are its
    # own; the GPU script runs on the CPU, the port on XLA:CPU, wrong ports through its own
    # configuration.
    Case("accelerate-xla", "accelerate_train.py", "", (
        ("accelerate on xla", "", "pass !global-batch-changed"),
        ("accelerate max_norm 0.1", "--max-norm 0.1", "clipping-changed !global-batch-changed"),
        ("accelerate accumulation 2, same lr", "--accum 2", "global-batch-changed"),
    ), candidate_launcher=_xla_cpu, target="xla:cpu"),
    # The GPU script ported to accelerate (its plain loop -> Accelerator on the CPU): its
    # prepared DataLoader reads one batch ahead, so counted where the DataLoader yields the
    # port's first step took two batches: a live global-batch-changed, withdrawn at the end
    # (the harness bans a withdrawn alarm too).
    Case("accelerate-cpu", "accelerate_train.py", "--plain", (
        ("accelerate on the cpu", "--cpu", "pass !global-batch-changed"),
        ("accelerate on the cpu, max_norm 0.1", "--cpu --max-norm 0.1",
         "clipping-changed !global-batch-changed"),
    )),
    # The HF Trainer itself (transformers 5.25): a tiny GPT-2 from a config, its own loop,
    # loader (MpDeviceLoader on XLA), clipping and accumulation.
    Case("hf-trainer-xla", "hf_trainer_train.py", "--cpu", (
        ("trainer on xla", "", "pass !global-batch-changed"),
        ("trainer max_grad_norm 0.1", "--max-norm 0.1", "clipping-changed !global-batch-changed"),
        ("trainer accumulation 2, same lr", "--accum 2", "global-batch-changed"),
    ), criteria=FINAL_LOSS, candidate_launcher=_xla_cpu, target="xla:cpu"),
    Case("spmd-xla", "ddp.py", "--mode ddp", (
        ("spmd, batch sharded 4 ways", "", "pass"),
        ("spmd, batch never sharded", "--no-shard", "wrong-hardware"),
    ), criteria=ACCURACY + "\n[hardware]\ndevices = 4\n", launcher=_torchrun4,
        candidate_launcher=_xla_spmd4, candidate_script="spmd_mesh.py", target="xla:cpu"),
)
