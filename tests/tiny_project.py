"""The project most session tests work on: a folder holding a copy of the tiny trainer (a few
hundred CPU steps with a clip_grad_norm_ to port), so each test starts from the same tree."""

from __future__ import annotations

import shutil
from pathlib import Path

TINY_TRAINER = Path(__file__).resolve().parent / "fixtures" / "trainers" / "train_tiny.py"


def tiny_project(folder: Path, script: str = "train.py") -> Path:
    """``folder`` (made if missing; its parent must exist) holding the tiny trainer as
    ``script``; returns ``folder``."""
    folder.mkdir(exist_ok=True)
    shutil.copy(TINY_TRAINER, folder / script)
    return folder
