"""A local Ray cluster, as the tests and the benchmark start it, listens on loopback only
(issue 38.13): the head, a second node, and a driver connected through portside's RayLauncher
that has run a task (so a worker process exists). Every listening TCP socket and every bound
UDP socket of every process of theirs is read from the kernel (psutil: /proc/PID/fd matched
against /proc/net/tcp, tcp6, udp, udp6) and must be on 127.0.0.1 / ::1 / ::ffff:127.0.0.1.
Before, the GCS and the raylet listened on all interfaces and the runtime-env agent on the
host's outward IP."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from ray_cluster import LocalRayCluster, ray_env

pytest.importorskip("ray")
pytestmark = [pytest.mark.slow,  # two Ray nodes and a driver: 30-90 s on a loaded machine
              pytest.mark.timeout(600)]

LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}
DRIVER = """
import sys, ray
from portside.core.study.ray_launcher import RayLauncher
RayLauncher(sys.argv[1])
assert ray.get(ray.remote(lambda: 7).options(num_cpus=0).remote()) == 7
print("ready", flush=True)
sys.stdin.read()
"""


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _bound(procs: list[psutil.Process]) -> list[tuple[str, int, str, int]]:
    """(process name, pid, address, port) of each listening TCP / bound UDP socket."""
    out = []
    for p in procs:
        try:
            conns = p.net_connections(kind="inet")
            name = p.name()
        except psutil.Error:
            continue
        for c in conns:
            if c.status == psutil.CONN_LISTEN or (c.status == psutil.CONN_NONE and c.laddr):
                out.append((name, p.pid, c.laddr.ip, c.laddr.port))
    return out


def test_local_ray_cluster_listens_on_loopback_only(tmp_path: Path) -> None:
    env = ray_env()
    cluster = LocalRayCluster(env, head_cpus=1)
    driver = None
    log = tmp_path / "driver.log"
    try:
        node = cluster.add_node("extra", {"extra": 1}, cpus=1)
        with open(log, "wb") as err:
            driver = subprocess.Popen([sys.executable, "-c", DRIVER, cluster.address],
                                      env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=err, text=True)
        assert driver.stdout is not None
        line = driver.stdout.readline()  # "" when it failed (it exits: stdout closes)
        assert line.strip() == "ready", log.read_text()[-3000:]
        time.sleep(2)  # the agents a node starts late (runtime env, metrics) are up
        procs = [*_tree(cluster.head.pid), *_tree(node.pid), *_tree(driver.pid)]
        names = {p.name() for p in procs if p.is_running()}
        assert {"gcs_server", "raylet"} <= names, names
        bound = _bound(procs)
        assert any(n == "gcs_server" for n, *_ in bound), bound  # the check sees sockets
        exposed = [b for b in bound if b[2] not in LOOPBACK]
        assert not exposed, f"listening beyond loopback: {exposed}"
    finally:
        if driver is not None:
            driver.kill()
            driver.wait()
        cluster.close()
