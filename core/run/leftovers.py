"""Processes a killed portside left behind, found by the probe file in their environment."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path


def kill_run_processes(probe_out: Path) -> int:
    """SIGKILL what a killed engine's run left behind: every process whose environment carries
    this run's probe file (its shell, the trainer, children that left the process group)."""
    import psutil

    prefix = str(Path(os.path.abspath(probe_out)))
    killed = 0
    for proc in psutil.process_iter():
        try:
            out = proc.environ().get("PORTSIDE_PROBE_OUT", "")
        except (psutil.Error, OSError):
            continue
        if out.startswith(prefix):
            with contextlib.suppress(psutil.Error, OSError):
                proc.send_signal(signal.SIGKILL)
                killed += 1
    return killed
