"""A real local Ray cluster for tests and benchmarks: a head on 127.0.0.1 and extra nodes,
each a `ray start --block` process of its own, so one node can be killed (its whole process
tree: raylet, workers, what they started) while the others go on."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

RAY = str(Path(sys.executable).with_name("ray"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalRayCluster:
    def __init__(self, env: dict[str, str], head_cpus: int = 2) -> None:
        self.env = env
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        # Short: Ray's unix sockets live under it (a path at most ~107 bytes).
        self.temp = Path(tempfile.mkdtemp(prefix="psray-", dir="/tmp"))
        self.nodes: list[subprocess.Popen[bytes]] = []
        self.head = self._start(["--head", "--port", str(self.port), "--num-cpus",
                                 str(head_cpus), "--include-dashboard", "false",
                                 "--temp-dir", str(self.temp)], "head")
        self.wait_nodes(1)

    def _start(self, args: list[str], name: str) -> subprocess.Popen[bytes]:
        log = open(self.temp / f"{name}.log", "ab")  # noqa: SIM115 (closed with the process)
        proc = subprocess.Popen(
            [RAY, "start", "--block", "--node-ip-address", "127.0.0.1",
             "--object-store-memory", "80000000", "--disable-usage-stats", *args],
            stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        self.nodes.append(proc)
        return proc

    def add_node(self, name: str, resources: dict[str, float], cpus: int = 1
                 ) -> subprocess.Popen[bytes]:
        # A node killed just before may still count as alive: wait for a new id instead.
        known = {n["id"] for n in self.nodes_info()}
        proc = self._start(["--address", self.address, "--num-cpus", str(cpus),
                            "--resources", json.dumps(resources)], name)
        deadline = time.monotonic() + 180
        while not any(n["id"] not in known for n in self.alive_nodes()):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise TimeoutError(f"node {name} never joined the Ray cluster")
            time.sleep(1.0)
        return proc

    def nodes_info(self) -> list[dict[str, Any]]:
        """Every node the cluster has known (dead ones too): id, alive, resources."""
        code = (f"import json, ray; ray.init(address={self.address!r}, log_to_driver=False); "
                "print(json.dumps([{'id': n['NodeID'], 'alive': n['Alive'], "
                "'resources': n['Resources']} for n in ray.nodes()]))")
        out = subprocess.run([sys.executable, "-c", code], env=self.env, capture_output=True,
                             text=True, timeout=120)
        if out.returncode != 0:
            raise RuntimeError(out.stderr[-2000:])
        return list(json.loads(out.stdout.strip().splitlines()[-1]))

    def alive_nodes(self) -> list[dict[str, Any]]:
        try:
            return [n for n in self.nodes_info() if n["alive"]]
        except RuntimeError:
            return []

    def wait_nodes(self, n: int, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(self.alive_nodes()) >= n:
                return
            time.sleep(1.0)
        raise TimeoutError(f"the Ray cluster never had {n} live node(s)")

    @staticmethod
    def kill(proc: subprocess.Popen[bytes]) -> int:
        """SIGKILL a node's whole tree at once, as a machine's death would end it."""
        try:
            tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            return 0
        for p in tree:
            with contextlib.suppress(psutil.Error):
                p.send_signal(signal.SIGKILL)
        proc.wait()
        return len(tree)

    def close(self) -> None:
        for proc in reversed(self.nodes):
            if proc.poll() is None:
                self.kill(proc)
        subprocess.run(["rm", "-rf", str(self.temp)], check=False)


def ray_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment nodes and the study run with: this venv first on PATH (the fixtures run
    `python`), portside importable, one thread per run (the machine is shared)."""
    env = dict(base or os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    env["OMP_NUM_THREADS"] = "1"
    env["RAY_DISABLE_USAGE_STATS"] = "1"
    return env
