"""Issue 24 item 13 and a Low: the SSH link dropped under a hung remote candidate, and the base
folder of ``ssh://host/remote/dir`` left on the host.

The host is this machine behind a real OpenSSH server on loopback (tests/integration/
loopback_sshd.py). The link is dropped at sshd's end, the listener left up: every per-connection
sshd is SIGKILLed (the TCP connections close) or SIGSTOPped (they stay open and nothing answers:
what a cut link or a frozen host looks like to the client). Ground truth from outside portside:
the CLI's exit and JSON, the clock, psutil's process table, the remote folder's listing.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from cli_run import cli_popen
from loopback_sshd import ALIAS, LoopbackSSHD, why_not
from test_remote import _runner_parts

from portside.core.run import ssh as remote
from portside.core.run.ssh import SSHExecutor

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "fixtures" / "trainers" / "train_tiny.py"
CRITERIA = REPO / "sessions" / "demo" / "criteria.toml"
PY = sys.executable
BASE = f"{PY} train_tiny.py"
HUNG = f"{BASE} --steps 40 --sleep-at 30 --sleep 300"  # as in the issue: hangs at step 30
BOUND_S = 18.0  # drop → verify has exited, the run classified and the remote job gone

pytestmark = pytest.mark.skipif(bool(why_not()), reason=why_not() or "ok")


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _hung_training(server: LoopbackSSHD, flag: str = "--sleep 300") -> int | None:
    """The remote candidate's training process once it has stepped (a step record on the
    host), else None."""
    for proc in psutil.process_iter(["pid", "cmdline", "cwd"]):
        cmd = " ".join(proc.info.get("cmdline") or [])
        if "train_tiny.py" in cmd and flag in cmd and not cmd.startswith("/bin/sh") \
                and (proc.info.get("cwd") or "").startswith(str(server.home)):
            records = list(server.home.glob(".portside-*/records/cand*.jsonl"))
            steps = sum(f.read_text(errors="replace").count('"type": "step"') for f in records)
            return proc.info["pid"] if steps else None
    return None


def _wait_hung(pid: int, within: float = 60.0) -> None:
    """Until the process uses no CPU for a second: asleep at step 30."""
    proc, deadline = psutil.Process(pid), time.monotonic() + within
    last = sum(proc.cpu_times()[:2])
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = sum(proc.cpu_times()[:2])
        if now - last < 0.05:
            return
        last = now
    pytest.fail(f"the training process {pid} never went idle")


def _agent_of(training: int) -> int:
    """The host-side agent above the training process (agent → /bin/sh → training)."""
    agent = psutil.Process(training).parent().parent()
    assert "agent.py" in " ".join(agent.cmdline()), agent.cmdline()
    return agent.pid


@pytest.mark.slow  # a real sshd, a dropped link and the timeouts that detect it
@pytest.mark.parametrize("how", ["killed", "frozen"])
def test_dropped_link_under_a_hung_candidate_ends_verify_and_the_remote_job(
        tmp_path: Path, how: str) -> None:
    """Before the fix, frozen: verify ended ~20 s after the drop (ssh's ServerAlive 5 s x 3)
    and the hung training was still alive on the host for ~56 s (the agent gave up only after
    60 s without pings). Killed: classified at once before too (the TCP close reaches ssh), but
    the host-side agent was still alive when verify had exited (gone ~0.5 s later)."""
    server = LoopbackSSHD(tmp_path / "sshd").start()
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(TINY, project / "train_tiny.py")
    before = server.listing()
    env = {k: v for k, v in os.environ.items() if k != "PORTSIDE_DB"}
    verify = cli_popen(
        "verify", "--reference", f"{BASE} --steps 40", "--candidate", HUNG, "--target", "cpu",
        "--reference-runs", "1", "--cwd", str(project), "--criteria", str(CRITERIA),
        "--candidate-host", ALIAS, "--ssh-config", str(server.config), "--json",
        db=tmp_path / "p.db", env=env)
    try:
        deadline, training = time.monotonic() + 180, None
        while training is None:
            assert verify.poll() is None, verify.communicate()[1][-3000:]
            if time.monotonic() > deadline:
                verify.kill()
                counts = {f.name: f.read_text(errors="replace").count('"type": "step"')
                          for f in server.home.glob(".portside-*/records/*")}
                pytest.fail(f"the remote candidate never stepped: {counts} "
                            f"{server.processes_under_home()} {verify.communicate()[1][-3000:]}")
            time.sleep(0.2)
            training = _hung_training(server)
        agent = _agent_of(training)
        _wait_hung(training)  # hung at step 30: no output, no record
        assert server.drop_links(signal.SIGKILL if how == "killed" else signal.SIGSTOP) >= 2
        dropped = time.monotonic()
        try:
            out, err = verify.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"verify still running 60 s after the link was {how}")
        took = time.monotonic() - dropped
        left = [pid for pid in (training, agent) if _alive(pid)]
        assert verify.returncode == 1, err[-3000:]
        cand = json.loads(out)["candidate"]
        assert cand["reason"] == "connection-lost", cand
        assert cand["outcome"] == "failed-error"
        assert "ConnectionLost" in cand["error"] and ALIAS in cand["error"]
        assert not left, f"outlived verify: training {training}, agent {agent}: alive {left}"
        assert took < BOUND_S, f"verify ended {took:.1f} s after the link was {how}"
        assert server.listing() == before  # the session's folder went too
    finally:
        if verify.poll() is None:
            verify.kill()
            verify.wait()
        server.drop_links(signal.SIGCONT)
        server.kill()


def test_a_base_folder_portside_made_goes_and_one_that_existed_stays(tmp_path: Path) -> None:
    """``ssh://host/remote/dir``: the folders the keeper had to create for it are removed at the
    end when empty, through the keeper's own end and through the last connection when the
    keeper's was dropped; a base that existed stays, with the user's files. Before the fix
    ``made/deeper`` stayed on the host after every session."""
    server = LoopbackSSHD(tmp_path / "sshd").start()
    try:
        made = tmp_path / "host" / "made"
        existing = tmp_path / "host" / "existing"
        existing.mkdir(parents=True)
        (existing / "mine.txt").write_text("the user's own\n")
        port = server.port
        for base, dropped in ((made / "deeper", False), (made / "deeper", True),
                              (existing, False), (existing, True)):
            ex = SSHExecutor(f"ssh://root@127.0.0.1:{port}{base}", f"sess-{dropped}",
                             ssh_config=server.config)
            asyncio.run(ex._keep_session())
            assert (base / f".portside-sess-{dropped}" / "tree").is_dir()
            if dropped:  # the keeper's connection dropped: close() reaches the host again
                server.drop_links(signal.SIGKILL)
                assert ex._keeper is not None
                ex._keeper.wait(timeout=20)
            ex.close()
            if base == existing:
                assert sorted(p.name for p in existing.iterdir()) == ["mine.txt"]
            else:
                assert not made.exists(), sorted(str(p) for p in made.rglob("*"))
        assert (tmp_path / "host").is_dir()  # above the first folder made: never touched
    finally:
        server.kill()


@pytest.mark.slow  # a real sshd gone silent and the timeouts that detect it
def test_a_host_gone_silent_under_a_chatty_run_still_stops_it(tmp_path: Path) -> None:
    """The whole sshd frozen (listener too: portside cannot reach the host again) under a run
    that prints and steps nonstop: the agent's own watchdog must end the run, although its
    writes block on the full pipe to the frozen sshd. Before the fix the watchdog lived in the
    agent's main loop, which blocked on that write: the training was still alive 60 s later."""
    server = LoopbackSSHD(tmp_path / "sshd").start()
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(TINY, project / "train_tiny.py")
    verifier, _ = _runner_parts(tmp_path)
    executor = SSHExecutor(ALIAS, "sess-silent", ssh_config=server.config)
    verifier.executors["candidate"] = executor
    frozen: list[float] = []
    found: list[int] = []

    async def scenario() -> str:
        task = asyncio.create_task(verifier.run_candidate(f"{BASE} --steps 1000000", project))
        while not found:
            assert not task.done(), "the run ended before it stepped"
            await asyncio.sleep(0.2)
            pid = _hung_training(server, "--steps 1000000")
            if pid is not None:
                found.append(pid)
        await asyncio.sleep(1.0)
        assert server.proc is not None
        server.drop_links(signal.SIGSTOP)
        server.proc.send_signal(signal.SIGSTOP)
        frozen.append(time.monotonic())
        report = await task
        return report.result.reason

    try:
        assert asyncio.run(scenario()) == "connection-lost"
        deadline = frozen[0] + 60
        while _alive(found[0]) and time.monotonic() < deadline:
            time.sleep(0.2)
        took = time.monotonic() - frozen[0]
        assert not _alive(found[0]), "the training outlived the silent link by 60 s"
        beat = getattr(remote, "AGENT_HEARTBEAT_S", 60.0)  # 60: the agent's before the fix
        assert took < beat + 5, f"the training lived {took:.1f} s on"
    finally:
        if server.proc is not None:
            server.proc.send_signal(signal.SIGCONT)
        server.drop_links(signal.SIGCONT)
        executor.close()
        server.kill()
