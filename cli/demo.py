"""`portside demo`: the embedded GPU project, ported live by a recorded (scripted) agent."""

from __future__ import annotations

import shlex
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def demo_dir() -> Path:
    """The demo's files: package data of `portside.demo` (sessions/demo in a checkout, the
    installed copy after `pip install`): the session copies the project before any run, so a
    read-only site-packages is fine."""
    from importlib.resources import files

    try:
        d = Path(str(files("portside.demo")))
    except ModuleNotFoundError:  # an install from before the demo was package data
        d = Path(__file__).resolve().parents[1] / "sessions" / "demo"
    if not (d / "project" / "train.py").is_file():
        raise FileNotFoundError(
            f"{d}: the demo's files are missing from this install (reinstall portside: "
            "`pip install --force-reinstall portside`, or `make venv` in a checkout)"
        )
    return d


def demo_project(d: Path) -> Path:
    """The demo project where its runs can read it. Installed, it lies inside the venv, and a
    sandboxed run hides its project and everything around it (the venv with it): so it is
    copied to portside's cache first, afresh each time. A checkout's copy is used as it is."""
    src = d / "project"
    if Path(sys.prefix).resolve() not in src.resolve().parents:
        return src
    import platformdirs

    dst = Path(platformdirs.user_cache_dir("portside", appauthor=False)) / "demo-project"
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
    return dst


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
        project=demo_project(d),
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
