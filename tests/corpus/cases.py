"""The corpus: correct ports and planted silent failures, in the style of widely used training
scripts (written here; synthetic data, tiny models). Each case: a reference command, candidates
with what the verdict must be — "pass" (no error alarm against three reference seeds) or the
alarm kind that names the planted cause."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent

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


def _python(py: str) -> str:
    return py


def _torchrun(py: str) -> str:
    return f"{py} -m torch.distributed.run --standalone --nproc_per_node 2"


@dataclass(frozen=True)
class Case:
    name: str
    script: str
    reference: str
    candidates: tuple[tuple[str, str, str], ...]  # (label, flags, expected)
    criteria: str = ACCURACY
    launcher: Callable[[str], str] = _python
    cwd: Path = HERE


CASES: tuple[Case, ...] = (
    Case("steplr", "mnist_steplr.py", "", (
        ("drop_last", "--drop-last", "pass"),
        ("drop_last+workers", "--drop-last --workers 2", "pass"),
        ("drop_last,no schedule", "--drop-last --no-sched", "lr-schedule-changed"),
        ("other gamma", "--gamma 0.5", "lr-schedule-changed"),
        ("weight decay added", "--weight-decay 0.05", "numeric-drift !clipping-changed"),
    )),
)
