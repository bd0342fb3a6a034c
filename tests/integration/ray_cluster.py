"""A real local Ray cluster for tests and benchmarks: a head on 127.0.0.1 and extra nodes,
each a `ray start --block` process of its own, so one node can be killed (its whole process
tree: raylet, workers, what they started) while the others go on.

Every server of it listens on loopback only (issue 38.13). Ray binds its gRPC servers (GCS,
raylet, object manager, workers) and the runtime-env agent to the node's IP, but on Linux
`ray start --node-ip-address 127.0.0.1` and `--address 127.0.0.1:PORT` are turned into the
host's outward IP (ray._private.services.resolve_ip_for_localhost, "so other machines can
reach it"): the servers then listened on all interfaces or the host's IP. Nodes start through
:data:`LOOPBACK_START`, which keeps 127.0.0.1 as given; a driver connects with
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (:func:`ray_env`), Ray's own switch for one-machine
use, under which 127.0.0.1 stays 127.0.0.1 (it refuses `ray start --address`, so the nodes
are started without it)."""

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

import psutil

ONE_MACHINE = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
# `ray start` with loopback kept as loopback: the node's servers bind 127.0.0.1 only.
LOOPBACK_START = (
    "import sys\n"
    "from ray._private import services\n"
    "services.resolve_ip_for_localhost = lambda host: host\n"
    "from ray.scripts.scripts import main\n"
    "sys.argv[0] = 'ray'\n"
    "sys.exit(main())\n")


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

    def _start(self, args: list[str], name: str, tries: int = 3) -> subprocess.Popen[bytes]:
        """Start a node and wait until `ray start` says it runs (it has registered with the
        head): no driver is connected to ask, which takes minutes on a loaded machine. A node
        whose start timed out on a busy GCS ("node timed out during startup") is started again,
        as an autoscaler would."""
        for attempt in range(1, tries + 1):
            try:
                return self._start_once(args, f"{name}-{attempt}" if attempt > 1 else name)
            except RuntimeError:
                if attempt == tries or "--head" in args:
                    raise
        raise AssertionError("unreachable")

    def _start_once(self, args: list[str], name: str) -> subprocess.Popen[bytes]:
        path = self.temp / f"{name}.log"
        log = open(path, "ab")  # noqa: SIM115 (closed with the process)
        env = {k: v for k, v in self.env.items() if k != ONE_MACHINE}
        proc = subprocess.Popen(
            [sys.executable, "-c", LOOPBACK_START, "start", "--block",
             "--node-ip-address", "127.0.0.1",
             "--object-store-memory", "80000000", "--disable-usage-stats", *args],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.nodes.append(proc)
        deadline = time.monotonic() + 300
        while b"Ray runtime started" not in path.read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = path.read_bytes()[-2000:].decode("utf-8", "replace")
                raise RuntimeError(f"ray node {name} did not start:\n{tail}")
            time.sleep(0.5)
        return proc

    def add_node(self, name: str, resources: dict[str, float], cpus: int = 1
                 ) -> subprocess.Popen[bytes]:
        return self._start(["--address", self.address, "--num-cpus", str(cpus),
                            "--resources", json.dumps(resources)], name)

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
    env[ONE_MACHINE] = "0"  # a driver's 127.0.0.1 stays loopback (the nodes drop it)
    # A loaded machine's GCS registers a node slower than Ray's default 30 s wait.
    env.setdefault("RAY_raylet_start_wait_time_s", "120")
    return env
