"""Is torch_xla usable, answered without a silent wait: on disk at once, by import once.

`import torch_xla` takes ~20 s on a loaded machine; the demo used to leave the terminal blank
that long before its first frame. Now the package found on disk is enough to open the screen;
the import is checked in the background and its answer cached (keyed by the interpreter and
the package's mtime, so a rebuilt venv is checked again).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

CACHE = Path.home() / ".cache" / "portside" / "xla-check.json"
IMPORT_TIMEOUT_S = 180


def candidates() -> list[str]:
    """$PORTSIDE_XLA_PYTHON, else the venv `make xla-venv` builds."""
    out = [os.environ.get("PORTSIDE_XLA_PYTHON", ""),
           str(Path.home() / ".cache" / "portside" / "xla-venv" / "bin" / "python")]
    return [py for i, py in enumerate(out) if py and py not in out[:i] and Path(py).exists()]


def package_dir(py: str) -> Path | None:
    """torch_xla's folder in the venv of interpreter ``py`` (no process started)."""
    root = Path(py).parent.parent
    for site in sorted(root.glob("lib/python3*/site-packages")):
        if (site / "torch_xla" / "__init__.py").exists():
            return site / "torch_xla"
    return None


def _stamp(py: str, pkg: Path) -> str:
    # Not realpath: a venv's python links to the base interpreter that other venvs share.
    return f"{os.path.abspath(py)}:{pkg}:{(pkg / '__init__.py').stat().st_mtime_ns}"


def _read_cache() -> dict[str, dict[str, object]]:
    try:
        data = json.loads(CACHE.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def cached(py: str) -> bool | None:
    """The cached answer for ``py`` (None: never checked, or the venv changed since)."""
    pkg = package_dir(py)
    if pkg is None:
        return None
    entry = _read_cache().get(_stamp(py, pkg))
    return bool(entry.get("ok")) if isinstance(entry, dict) else None


def check_import(py: str) -> tuple[bool, str]:
    """Import torch_xla in ``py`` (slow), and cache the answer."""
    try:
        proc = subprocess.run([py, "-c", "import torch_xla"], capture_output=True, text=True,
                              timeout=IMPORT_TIMEOUT_S)
        ok, why = proc.returncode == 0, (proc.stderr.strip().splitlines() or [""])[-1]
        # A kill (the terminal closed mid-check) says nothing about the venv: not cached.
        lasting = proc.returncode >= 0
    except (OSError, subprocess.TimeoutExpired) as exc:
        ok, why, lasting = False, f"{type(exc).__name__}: {exc}", False
    pkg = package_dir(py)
    if pkg is not None and lasting:
        data = _read_cache()
        data[_stamp(py, pkg)] = {"ok": ok, "error": why[:300]}
        try:
            CACHE.parent.mkdir(parents=True, exist_ok=True)
            tmp = CACHE.with_suffix(".tmp")
            tmp.write_text(json.dumps(data, indent=1))
            tmp.replace(CACHE)
        except OSError:
            pass  # a cache: the next start checks again
    return ok, why


def quick_xla_python() -> tuple[str | None, bool]:
    """(interpreter, verified) at once: a cached good import, else an interpreter whose venv
    holds torch_xla (verified False: check_import it in the background)."""
    found = [py for py in candidates() if package_dir(py) is not None]
    for py in found:
        if cached(py):
            return py, True
    fresh = [py for py in found if cached(py) is None]  # a cached failure is skipped
    return (fresh[0], False) if fresh else (None, False)
