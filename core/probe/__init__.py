"""The portside probe: injected into training processes through PYTHONPATH.

This package's own code (here) only prepares environments; the probe itself lives in
``_probe.py`` and is loaded by ``inject/sitecustomize.py`` inside the training process, without
importing portside. Record format: FORMAT.md.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["inject_env", "probe_dir", "format_doc", "shipped_files"]

_ENV_KEYS = ("PORTSIDE_PROBE_OUT", "PORTSIDE_SEED_OFFSET", "PORTSIDE_PROBE_ROOT_PID",
             "PORTSIDE_PROBE_MAX_STEPS")


def probe_dir() -> Path:
    """The directory to put first on PYTHONPATH (it holds the bootstrap sitecustomize.py)."""
    return Path(__file__).resolve().parent / "inject"


def shipped_files() -> list[str]:
    """What a training process on another host needs of the probe, relative to this folder:
    the bootstrap, the probe and the collaborators it loads by path beside it (``_*.py``),
    and trace mode (``trace.py``). ``core/run/ssh.py`` ships these."""
    here = Path(__file__).resolve().parent
    return ["inject/sitecustomize.py", *sorted(p.name for p in here.glob("_*.py")
                                               if p.name not in ("__init__.py", "__main__.py")),
            "trace.py"]


def format_doc() -> Path:
    return Path(__file__).resolve().parent / "FORMAT.md"


def inject_env(env: Mapping[str, str], out: str, seed_offset: int = 0,
               max_steps: int = 0) -> dict[str, str]:
    """A copy of env that activates the probe in every Python process started with it.

    out: the JSONL file for rank 0 / the first process (others write beside it, see FORMAT.md).
    max_steps: each process ends itself after that many optimizer steps (0: runs to its end).
    """
    new = {k: v for k, v in env.items() if k not in _ENV_KEYS}
    d = str(probe_dir())
    parts = [p for p in new.get("PYTHONPATH", "").split(os.pathsep) if p and p != d]
    new["PYTHONPATH"] = os.pathsep.join([d, *parts])
    new["PORTSIDE_PROBE_OUT"] = os.path.abspath(out)
    new["PORTSIDE_SEED_OFFSET"] = str(int(seed_offset))
    if max_steps > 0:
        new["PORTSIDE_PROBE_MAX_STEPS"] = str(int(max_steps))
    return new
