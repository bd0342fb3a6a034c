"""Trace mode off costs nothing: with the probe injected, no trace code is loaded and no
module hook is registered (so the probe's overhead benchmark is unaffected)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from cli_run import clean_env

from portside.core.probe import inject_env

CODE = (
    "import sys, torch\n"
    "from torch.nn.modules import module as m\n"
    "print(int('_portside_probe' in sys.modules), int('_portside_trace' in sys.modules),"
    " len(m._global_forward_hooks), len(m._global_forward_pre_hooks))\n"
)


def test_trace_off_installs_nothing(tmp_path: Path) -> None:
    env = inject_env(clean_env(), str(tmp_path / "p.jsonl"))
    out = subprocess.run([sys.executable, "-c", CODE], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["1", "0", "0", "0"]
    env["PORTSIDE_TRACE_OUT"] = str(tmp_path / "t.jsonl")
    out = subprocess.run([sys.executable, "-c", CODE], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["1", "1", "1", "1"]  # the same check sees it when it is on
