"""`portside demo`: the embedded GPU project, ported live by a recorded (scripted) agent."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "sessions" / "demo"


def demo_dir() -> Path:
    if not (DEMO / "project" / "train.py").exists():
        raise FileNotFoundError(
            f"{DEMO}: the demo files are not here (portside demo runs from a source checkout; "
            "`make demo` sets that up)"
        )
    return DEMO


def find_xla_python() -> str | None:
    """An interpreter where torch_xla imports: $PORTSIDE_XLA_PYTHON, else the suite's venv."""
    candidates = [os.environ.get("PORTSIDE_XLA_PYTHON", ""),
                  str(Path.home() / ".cache" / "portside" / "xla-venv" / "bin" / "python")]
    for py in candidates:
        if not py or not Path(py).exists():
            continue
        try:
            ok = subprocess.run([py, "-c", "import torch_xla"], capture_output=True,
                                timeout=120).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if ok:
            return py
    return None


def demo_config(*, policy: str, speed: float, xla_python: str | None, headless: bool,
                workdir: Path | None) -> tuple[Any, str]:
    """The session config for the demo, and the banner that says how it will run."""
    from portside.core.agent.scripted import ScriptedAgent
    from portside.core.log.criteria import load_criteria
    from portside.core.session.config import SessionConfig

    d = demo_dir()
    py = shlex.quote(sys.executable)
    reference = f"OMP_NUM_THREADS=1 {py} train.py"
    if xla_python:
        candidate = f"PJRT_DEVICE=CPU OMP_NUM_THREADS=1 {shlex.quote(xla_python)} train.py"
        target = "xla:cpu"
        banner = (f"scripted agent (recorded, no model is called) · candidate on XLA:CPU "
                  f"({xla_python})")
    else:
        candidate = reference
        target = "cpu"
        banner = ("scripted agent (recorded, no model is called) · torch_xla not found: the "
                  "candidate runs on the CPU and the target is set to cpu "
                  "(set PORTSIDE_XLA_PYTHON, or `make xla-venv`, for XLA:CPU)")
    config = SessionConfig(
        project=d / "project",
        target=target,
        reference_command=reference,
        candidate_command=candidate,
        criteria=load_criteria(d / "criteria.toml"),
        criteria_path=str(d / "criteria.toml"),
        reference_runs=2,
        reference_target="cpu",
        stall_s=300,
        timeout_s=1800,
        agent=ScriptedAgent(d / "agent.jsonl", speed=speed),
        policy=policy,  # type: ignore[arg-type]
        mode="demo",
        isolate=True,
        workdir=workdir,
        title="demo: synthetic clusters (CUDA) → torch_xla",
        meta={"banner": banner},
    )
    return config, banner
