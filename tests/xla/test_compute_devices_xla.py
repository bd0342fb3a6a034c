"""Issue 37 item 2 on real torch_xla (XLA:CPU, 4 devices, one process): the facts'
`compute_devices` counts the devices that did distinct work in the step, from the shardings of
its inputs and parameters, while `device_count` stays the host's 4. Ground truth: the mesh
and the `mark_sharding` calls of tests/xla/scripts/spmd_facts.py."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from portside.core.probe import _packed, inject_env

XLA_PYTHON = Path(os.environ.get("PORTSIDE_XLA_PYTHON")
                  or Path.home() / ".cache" / "portside" / "xla-venv" / "bin" / "python")
SCRIPT = Path(__file__).parent / "scripts" / "spmd_facts.py"

pytestmark = [
    pytest.mark.xla, pytest.mark.slow,
    pytest.mark.skipif(not XLA_PYTHON.exists(), reason=f"no torch_xla venv at {XLA_PYTHON}"),
]

RUNS = {  # name: (script args, compute_devices, scope)
    "replicated": (["--shard", "none"], 1, "mesh"),
    "data": (["--shard", "data"], 2, "mesh"),  # the batch over the 2-way "data" axis
    "model": (["--shard", "model"], 2, "mesh"),  # a weight over the 2-way "model" axis
    "both": (["--shard", "both"], 4, "mesh"),
    # the loss is device data by optimizer.step(): the shardings were read at its backward
    "data_sync_early": (["--shard", "data", "--sync-early"], 2, "mesh"),
    "no_spmd": (["--no-spmd"], 1, "process"),
}


@pytest.fixture(scope="module")
def facts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    tmp = tmp_path_factory.mktemp("compute")
    env = {**os.environ, "PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "4", "OMP_NUM_THREADS": "1"}
    procs = {}
    for name, (args, _, _) in RUNS.items():  # all at once: torch_xla costs seconds to start
        out = tmp / f"{name}.jsonl"
        procs[name] = (subprocess.Popen([str(XLA_PYTHON), str(SCRIPT), *args],
                                        env=inject_env(env, str(out)), text=True,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE), out)
    got = {}
    for name, (proc, out) in procs.items():
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        recs = [r for line in out.read_text().splitlines() for r in _packed.expand(json.loads(line))]
        (got[name],) = [r for r in recs if r["type"] == "facts"][:1]
    return got


@pytest.mark.parametrize("name", list(RUNS))
def test_compute_devices(facts: dict[str, dict], name: str) -> None:
    f = facts[name]
    _, want, scope = RUNS[name]
    assert "compute_devices_error" not in f, f["compute_devices_error"]
    assert (f["compute_devices"], f["compute_scope"]) == (want, scope), f["compute_devices_how"]
    assert f["device_count"] == 4  # the host's, whatever the step used
    if scope == "mesh":
        assert "4-device mesh" in f["compute_devices_how"]
        assert bool(f["compute_shardings"]) == (want > 1)
