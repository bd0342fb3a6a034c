"""`portside demo`: the embedded GPU project, ported live by a recorded (scripted) agent."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable
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
    """An interpreter where torch_xla imports: $PORTSIDE_XLA_PYTHON, else the suite's venv
    (the import is checked once per venv and cached: cli/xla_check.py)."""
    from .xla_check import check_import, quick_xla_python

    py, verified = quick_xla_python()
    if py is None or verified:
        return py
    return py if check_import(py)[0] else find_xla_python()


def check_in_background(py: str) -> Callable[[Any], None]:
    """Check that torch_xla imports in ``py`` while the screen is up; the returned hook,
    given the app, tells the reviewer what was found (a notice, never a blank wait)."""
    import contextlib
    import threading

    from .xla_check import check_import

    def on_app(app: Any) -> None:
        def work() -> None:
            ok, why = check_import(py)
            if ok:
                say, severity = "torch_xla imports: the candidate runs on XLA:CPU", "information"
            else:
                say, severity = (f"torch_xla does not import in {py}: {why} · the candidate "
                                 "will fail; quit and run `make xla-venv`"), "error"
            with contextlib.suppress(RuntimeError):  # the app already ended
                app.call_from_thread(app.notify, say, title="torch_xla", severity=severity,
                                     timeout=8 if ok else 30)

        app.notify(f"checking torch_xla… in {py} (once; cached after)", title="torch_xla",
                   timeout=20)
        threading.Thread(target=work, name="xla-check", daemon=True).start()

    return on_app


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
