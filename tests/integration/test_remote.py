"""Runs on a remote host over SSH, against a real OpenSSH server on a loopback port.

The "host" is this machine reached through sshd (its own throwaway keys, its own remote home):
every run goes through the real ssh client, the shipped files, the host-side agent and the
multiplexed record stream. Ground truth comes from outside the code under test: the same
verify run locally, the remote home's listing and hashes, psutil's process table.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_run import cli, cli_popen
from doubles import MemorySink
from loopback_sshd import ALIAS, LoopbackSSHD, why_not
from tiny_project import tiny_project
from treehash import tree_hash

from portside.core.log import events as ev
from portside.core.log.bus import EventBus
from portside.core.log.criteria import load_criteria
from portside.core.log.ssh_hosts import parse_host
from portside.core.run.ssh import SSHExecutor
from portside.core.session.verify import RunReport, Verifier

REPO = Path(__file__).resolve().parents[2]
CRITERIA = REPO / "sessions" / "demo" / "criteria.toml"
PY = sys.executable
BASE = f"{PY} train_tiny.py"  # relative: local runs use the project, remote ones its copy

pytestmark = pytest.mark.skipif(bool(why_not()), reason=why_not() or "ok")


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> object:
    server = LoopbackSSHD(tmp_path_factory.mktemp("sshd")).start()
    yield server
    server.kill()


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_project(tmp_path_factory.mktemp("project"), "train_tiny.py")


class _Harness:
    def __init__(self, tmp: Path, project: Path) -> None:
        self.sink = MemorySink()
        self.bus = EventBus(self.sink)
        self.verifier = Verifier(self.bus, "remote-test", load_criteria(CRITERIA), "cpu",
                                 tmp / "probe", stall_s=20.0, timeout_s=240)
        self.loop = asyncio.new_event_loop()
        self.project = project

    def reference(self) -> RunReport:
        return self.loop.run_until_complete(self.verifier.run_reference(BASE, self.project))

    def candidate(self, flags: str, executor: SSHExecutor | None = None) -> RunReport:
        if executor is None:
            self.verifier.executors.pop("candidate", None)
        else:
            self.verifier.executors["candidate"] = executor
        return self.loop.run_until_complete(
            self.verifier.run_candidate(f"{BASE} {flags}", self.project))


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory, project: Path) -> _Harness:
    h = _Harness(tmp_path_factory.mktemp("verify"), project)
    assert [h.reference().outcome, h.reference().outcome] == ["passed", "passed"]
    return h


def _kinds(report: RunReport) -> set[str]:
    return {a.kind for a in report.alarms if a.is_error}


@pytest.mark.slow
def test_remote_candidate_gives_the_local_alarms(harness: _Harness, sshd: LoopbackSSHD,
                                                  project: Path) -> None:
    before_home, before_project = sshd.listing(), tree_hash(project)
    executor = SSHExecutor(ALIAS, "sess-match", ssh_config=sshd.config, transport="auto")
    for flags, kind, outcome in (("--max-norm 0.05", "clipping-changed", "failed-silent"),
                                 ("--raise-at 5", "crashed", "failed-error")):
        local = harness.candidate(flags)
        remote = harness.candidate(flags, executor)
        assert kind in _kinds(local), local.alarms
        assert _kinds(remote) == _kinds(local), (remote.alarms, remote.result.tail[-5:])
        assert (remote.outcome, local.outcome) == (outcome, outcome)
        # The probe's records came back over the connection, as many steps as locally.
        assert remote.summary["steps"] == local.summary["steps"] > 0
    assert remote.result.error_type == local.result.error_type == "RuntimeError"
    assert executor.transport == ("rsync" if shutil.which("rsync") else "tar")  # auto
    # The session's folder is on the host until the end; each run's copy went with its run.
    left = [p for p in sshd.listing() if p.startswith(".portside-sess-match")]
    assert ".portside-sess-match/agent.py" in left
    assert not [p for p in left if p.startswith(".portside-sess-match/runs/cand")], left
    executor.close()
    assert sshd.listing() == before_home
    assert tree_hash(project) == before_project
    assert sshd.processes_under_home() == []


def _need(transport: str) -> None:
    if transport == "rsync" and not shutil.which("rsync"):
        pytest.skip("rsync is not installed (apt-get install -y rsync)")


def _start_sshd(tmp: Path) -> LoopbackSSHD:
    return LoopbackSSHD(tmp).start()


def _runner_parts(tmp: Path) -> tuple[Verifier, MemorySink]:
    sink = MemorySink()
    verifier = Verifier(EventBus(sink), "remote-fault", load_criteria(CRITERIA), "cpu",
                        tmp / "probe", stall_s=30.0, timeout_s=120)
    return verifier, sink


@pytest.mark.slow  # a real sshd killed mid-run
def test_sshd_killed_mid_run_is_connection_lost_and_leaves_nothing(tmp_path: Path,
                                                                   project: Path) -> None:
    server = _start_sshd(tmp_path / "sshd")
    before = server.listing()
    verifier, sink = _runner_parts(tmp_path)
    verifier.executors["candidate"] = SSHExecutor(ALIAS, "sess-drop", ssh_config=server.config)
    killed_at: list[float] = []

    async def scenario() -> RunReport:
        task = asyncio.create_task(verifier.run_candidate(
            f"{BASE} --sleep-at 4 --sleep 300", project))
        # Kill the server once steps have arrived over the connection: the run is live there.
        while not any(isinstance(e, ev.RunRecord) and any(r.get("type") == "step"
                      for r in e.records) for e in sink.events):
            assert not task.done(), "the run ended before any step arrived"
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)
        assert server.processes_under_home(), "no training process on the host side"
        server.kill()
        killed_at.append(time.monotonic())
        return await task

    try:
        report = asyncio.run(scenario())
        took = time.monotonic() - killed_at[0]
        assert report.result.reason == "connection-lost", report.result
        assert report.result.error_type == "ConnectionLost"
        assert ALIAS in report.result.error_message
        assert report.outcome == "failed-error"
        assert took < 10, f"classified {took:.1f} s after the server died"
        deadline = time.monotonic() + 5
        while server.processes_under_home() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert server.processes_under_home() == []
        # The keeper's connection went with the server: it removed the session's folder.
        _until(lambda: server.listing() == before, 5)
        assert server.listing() == before
        # The host is back: the next attempt sends everything again (the folder went) and runs.
        server.start()
        again = asyncio.run(verifier.run_candidate(f"{BASE} --steps 3", project))
        assert again.result.reason == "exit" and again.result.exit_code == 0, again.result
        verifier.executors["candidate"].close()  # type: ignore[attr-defined]
        assert server.listing() == before
    finally:
        server.kill()


def test_stall_on_the_host_kills_the_remote_group(tmp_path: Path, sshd: LoopbackSSHD,
                                                  project: Path) -> None:
    verifier, _ = _runner_parts(tmp_path)
    verifier.stall_s = 3.0
    executor = SSHExecutor(ALIAS, "sess-stall", ssh_config=sshd.config)
    verifier.executors["candidate"] = executor
    report = asyncio.run(verifier.run_candidate(f"{BASE} --sleep-at 3 --sleep 300", project))
    assert report.result.reason == "stalled"
    assert report.outcome == "failed-timeout"
    assert sshd.processes_under_home() == []
    executor.close()


def test_secrets_stay_home_and_a_host_without_torch_is_an_outcome(
        tmp_path: Path, sshd: LoopbackSSHD, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-must-not-travel")
    monkeypatch.setenv("PORTSIDE_TEST_LOCAL_ONLY", "local-value")
    verifier, _ = _runner_parts(tmp_path)
    executor = SSHExecutor(ALIAS, "sess-env", ssh_config=sshd.config)
    verifier.executors["candidate"] = executor
    env = dict(os.environ, RUN_NAMED="named-value")
    report = asyncio.run(verifier.run_candidate("env; /usr/bin/python3 train_tiny.py", project,
                                                env=env))
    text = "\n".join(report.result.tail)
    assert "sk-must-not-travel" not in text and "ANTHROPIC_API_KEY" not in text
    assert "PORTSIDE_TEST_LOCAL_ONLY" not in text  # portside's own environment stays home
    assert "RUN_NAMED=named-value" in text  # what the run's env sets explicitly goes
    if subprocess.run(["/usr/bin/python3", "-c", "import torch"],
                      capture_output=True).returncode == 0:
        pytest.skip("the system python3 has torch: no torch-less python to test with")
    assert report.outcome == "failed-error"
    assert report.result.error_type == "ModuleNotFoundError"
    assert "torch" in report.result.error_message
    executor.close()


def _verify_cli(tmp: Path, project: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PORTSIDE_DB"}
    return cli("verify", "--reference", BASE, "--candidate", f"{BASE} --max-norm 0.05",
               "--target", "cpu", "--reference-runs", "1", "--cwd", str(project),
               "--criteria", str(CRITERIA), "--json", *extra, db=tmp / "p.db", env=env)


def test_cli_unreachable_host_and_bad_key_exit_2(tmp_path: Path, sshd: LoopbackSSHD,
                                                 project: Path) -> None:
    closed = LoopbackSSHD.__new__(LoopbackSSHD)
    closed.root, closed.port = tmp_path, 1  # nothing listens on port 1 of loopback
    dead = closed.client_config(str(sshd.root / "userkey"), name="dead_config", port=1)
    done = _verify_cli(tmp_path, project, "--candidate-host", ALIAS, "--ssh-config", str(dead))
    assert done.returncode == 2, done.stderr
    assert "--candidate-host ([hosts] candidate) portside-test: host-unreachable" in done.stderr
    assert "Connection refused" in done.stderr
    done = _verify_cli(tmp_path, project, "--reference-host", ALIAS,
                       "--ssh-config", str(sshd.bad_config))
    assert done.returncode == 2, done.stderr
    assert "--reference-host ([hosts] reference) portside-test: auth-failed" in done.stderr
    assert "Permission denied" in done.stderr
    done = _verify_cli(tmp_path, project, "--candidate-host", "ssh://h:99999")
    assert done.returncode == 2 and "port '99999'" in done.stderr
    done = _verify_cli(tmp_path, project, "--candidate-host", f"{ALIAS},,w1")
    assert done.returncode == 2 and "an empty host in the list" in done.stderr
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PORTSIDE_SSH_TRANSPORT", "scp")
        done = _verify_cli(tmp_path, project, "--candidate-host", ALIAS)
    assert done.returncode == 2 and "PORTSIDE_SSH_TRANSPORT='scp'" in done.stderr
    # The same host named by the criteria file's [hosts] instead of the flag.
    crit = tmp_path / "hosts.toml"
    crit.write_text(CRITERIA.read_text() + f'\n[hosts]\ncandidate = "{ALIAS}"\n')
    env = {k: v for k, v in os.environ.items() if k != "PORTSIDE_DB"}
    done = cli("verify", "--reference", BASE, "--candidate", BASE, "--target", "cpu",
               "--reference-runs", "1", "--cwd", str(project), "--criteria", str(crit),
               "--ssh-config", str(dead), "--json", db=tmp_path / "p.db", env=env)
    assert done.returncode == 2, done.stderr
    assert "([hosts] candidate) portside-test: host-unreachable" in done.stderr


@pytest.mark.slow
def test_cli_verify_on_hosts_fails_the_planted_case_and_cleans_up(
        tmp_path: Path, sshd: LoopbackSSHD, project: Path) -> None:
    before_home, before_project = sshd.listing(), tree_hash(project)
    done = _verify_cli(tmp_path, project, "--candidate-host", ALIAS,
                       "--reference-host", f"ssh://root@127.0.0.1:{sshd.port}",
                       "--ssh-config", str(sshd.config))
    assert done.returncode == 1, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert "clipping-changed" in {a["kind"] for a in out["alarms"]}
    assert out["reference"][0]["outcome"] == "passed"
    assert out["candidate"]["host"] == ALIAS
    assert out["reference"][0]["host"] == f"ssh://root@127.0.0.1:{sshd.port}"
    assert sshd.listing() == before_home
    assert tree_hash(project) == before_project


def test_parse_host_forms() -> None:
    h = parse_host("ssh://me@tpu-vm:2222/data/runs/")
    assert (h.dest, h.user, h.port, h.base) == ("tpu-vm", "me", 2222, "/data/runs")
    assert parse_host("tpu-vm").dest == "tpu-vm" and parse_host("tpu-vm").port is None
    assert parse_host("ssh://tpu-vm").base is None
    for bad in ("ssh://", "ssh://h:x", "-oProxyCommand=x", "a b", "ssh://@h", "ssh://h;rm",
                "ssh://-oProxyCommand", "me@-oProxyCommand", "ssh://-v@h", "ssh://-lroot@h:22",
                "-v@h"):
        with pytest.raises(ValueError, match="ssh://"):
            parse_host(bad)
    with pytest.raises(ValueError, match="the user '-v' starts with '-'"):
        parse_host("ssh://-v@h")


def test_a_user_starting_with_a_dash_never_reaches_ssh(tmp_path: Path) -> None:
    """Issue 24 (low): `ssh://-v@host` went to ssh as `-l -v`. The CLI refuses it as a usage
    error, naming it, and no ssh is started (a fake ssh first on PATH would leave a mark)."""
    fake = tmp_path / "bin"
    fake.mkdir()
    mark = tmp_path / "ssh-ran"
    (fake / "ssh").write_text(f"#!/bin/sh\necho \"$@\" > {mark}\nexit 255\n")
    (fake / "ssh").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"}
    env.pop("PORTSIDE_DB", None)
    res = cli("verify", "--reference", "true", "--candidate", "true", "--target", "cpu",
              "--reference-runs", "1", "--cwd", str(tmp_path),
              "--candidate-host", "ssh://-v@127.0.0.1", db=tmp_path / "p.db", env=env, timeout=60)
    assert res.returncode == 2, res.stderr[-2000:]
    assert "the user '-v' starts with '-'" in res.stderr
    assert not mark.exists()


def _until(check: object, within: float) -> None:
    deadline = time.monotonic() + within
    while not check() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.1)


def test_portside_killed_mid_run_leaves_no_run_on_the_host(tmp_path: Path, sshd: LoopbackSSHD,
                                                           project: Path) -> None:
    """SIGKILL of portside itself: its end of the connections closes, the run's watchdog kills
    the run and the session's keeper removes the session's folder."""
    before = sshd.listing()
    env = {k: v for k, v in os.environ.items() if k != "PORTSIDE_DB"}
    verify = cli_popen(
        "verify", "--reference", f"{BASE} --sleep-at 3 --sleep 300", "--candidate", BASE,
        "--target", "cpu", "--reference-runs", "1", "--cwd", str(project),
        "--reference-host", ALIAS, "--ssh-config", str(sshd.config), db=tmp_path / "p.db",
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not any("train_tiny" in p for p in sshd.processes_under_home()):
            assert verify.poll() is None and time.monotonic() < deadline, "the run never started"
            time.sleep(0.1)
        assert sshd.listing() != before  # the session's folder is there while it runs
        verify.kill()
        verify.wait()
        _until(lambda: not sshd.processes_under_home(), 10)
        assert sshd.processes_under_home() == []
        _until(lambda: sshd.listing() == before, 10)
        assert sshd.listing() == before
    finally:
        if verify.poll() is None:
            verify.kill()
        for p in sshd.home.glob(".portside-*"):  # left by a failure: not for the next tests
            shutil.rmtree(p, ignore_errors=True)


_BETWEEN_RUNS = """
import asyncio, sys, time
from pathlib import Path
sys.path[:0] = [sys.argv[3], str(Path(sys.argv[3]).parent)]  # test_remote, and tests/ (doubles)
from test_remote import _runner_parts
from portside.core.run.ssh import SSHExecutor
verifier, _ = _runner_parts(Path(sys.argv[1]))
verifier.executors["candidate"] = SSHExecutor("portside-test", "sess-idle", ssh_config=Path(sys.argv[2]))
report = asyncio.run(verifier.run_candidate("echo done", Path(sys.argv[1])))
print(report.result.tail[-1], flush=True)
time.sleep(300)  # an agent thinking between attempts
"""


def test_portside_killed_between_runs_leaves_the_remote_home_as_it_was(
        tmp_path: Path, sshd: LoopbackSSHD) -> None:
    before = sshd.listing()
    proc = subprocess.Popen([PY, "-c", _BETWEEN_RUNS, str(tmp_path), str(sshd.config),
                             str(Path(__file__).parent)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "done"
        assert any(p.startswith(".portside-sess-idle/") for p in sshd.listing())
        proc.kill()
        proc.wait()
        _until(lambda: sshd.listing() == before, 10)
        assert sshd.listing() == before
    finally:
        if proc.poll() is None:
            proc.kill()
        for p in sshd.home.glob(".portside-*"):
            shutil.rmtree(p, ignore_errors=True)


def _ran_in(db: Path) -> dict[str, str]:
    """run id → its ``ran-in=$HOME`` line, from the session's log."""
    from portside.store import Store

    with Store(db) as store:
        sid = store.resolve_session("last")
        return {e.run_id: line for e in store.events(sid) if isinstance(e, ev.RunOutput)
                for line in e.lines if line.startswith("ran-in=")}


@pytest.mark.slow
def test_resume_runs_on_the_recorded_host(tmp_path: Path, sshd: LoopbackSSHD,
                                          project: Path) -> None:
    """`portside run --resume` after a SIGKILL: the candidate runs on the host it ran on."""
    from portside.store import Store

    before = sshd.listing()
    flag = tmp_path / "sleep-once"
    flag.touch()
    db = tmp_path / "r.db"
    env = {k: v for k, v in os.environ.items() if k != "PORTSIDE_DB"}
    candidate = f'echo "ran-in=$HOME"; if [ -e {flag} ]; then rm {flag}; sleep 300; fi; {BASE}'
    session = cli_popen(
        "run", str(project), "--headless", "--target", "cpu", "--reference", BASE,
        "--candidate", candidate, "--reference-runs", "1", "--criteria", str(CRITERIA),
        "--candidate-host", ALIAS, "--ssh-config", str(sshd.config), db=db, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        while not any("sleep 300" in p for p in sshd.processes_under_home()):
            assert session.poll() is None and time.monotonic() < deadline, "no candidate run"
            time.sleep(0.1)
        _until(lambda: _ran_in(db), 10)  # the cut-off run's first line is in the log
        session.kill()
        session.wait()
        _until(lambda: sshd.listing() == before, 10)
        assert sshd.listing() == before
        done = cli("run", "--resume", "last", "--headless", "--json", db=db, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        assert json.loads(done.stdout)["verdict"] == "pass"
        with Store(db) as store:
            sid = store.resolve_session("last")
            events = list(store.events(sid))
            cands = [r for r in store.runs(sid) if r["role"] == "candidate"]
        assert [r["outcome"] for r in cands] == ["aborted", "passed"]
        ran_in = _ran_in(db)
        # Both candidate runs, the one cut off and the resumed one, ran on the host.
        assert [ran_in.get(r["run_id"]) for r in cands] == [f"ran-in={sshd.home}"] * 2
        assert events[0].meta["hosts"]["candidate"] == ALIAS
        assert sshd.listing() == before
        assert sshd.processes_under_home() == []
    finally:
        if session.poll() is None:
            session.kill()
        for p in sshd.home.glob(".portside-*"):
            shutil.rmtree(p, ignore_errors=True)


def test_host_lost_between_runs_is_an_outcome(tmp_path: Path, sshd: LoopbackSSHD,
                                              project: Path) -> None:
    verifier, _ = _runner_parts(tmp_path)
    closed = LoopbackSSHD.__new__(LoopbackSSHD)
    closed.root = tmp_path
    dead = closed.client_config(str(sshd.root / "userkey"), name="dead_config", port=1)
    verifier.executors["candidate"] = SSHExecutor(ALIAS, "sess-gone", ssh_config=dead)
    report = asyncio.run(verifier.run_candidate(BASE, project))
    assert report.result.reason == "host-unreachable"
    assert report.result.error_type == "HostUnreachable"
    assert ALIAS in report.result.error_message and "refused" in report.result.error_message
    assert report.outcome == "failed-error"


@pytest.mark.slow  # two real sshd hosts and a torchrun across them
def test_two_host_slice_is_one_run_with_both_hosts_ranks(tmp_path: Path, sshd: LoopbackSSHD,
                                                         project: Path) -> None:
    other = _start_sshd(tmp_path / "sshd2")
    try:
        config = tmp_path / "slice_config"
        config.write_text(
            sshd.client_config(str(sshd.root / "userkey"), name="w0", alias="w0").read_text()
            + other.client_config(str(other.root / "userkey"), name="w1", alias="w1").read_text())
        from portside.core.log.ssh_hosts import parse_hosts
        from portside.core.run.ssh import SliceExecutor

        workers = [SSHExecutor(h, "sess-slice", ssh_config=config) for h in parse_hosts("w0,w1")]
        verifier, _ = _runner_parts(tmp_path)
        verifier.executors["candidate"] = SliceExecutor(workers)
        homes = (sshd.listing(), other.listing())
        report = asyncio.run(verifier.run_candidate(
            f"RANK=$PORTSIDE_HOST_INDEX WORLD_SIZE=$PORTSIDE_HOST_COUNT {BASE} --steps 15",
            project))
        assert report.result.reason == "exit" and report.result.exit_code == 0, report.result
        assert set(report.records.ranks) == {0, 1}
        assert [r.n for r in report.records.ranks.values()] == [15, 15]
        assert report.result.steps == 15 and report.result.record_count >= 30
        assert any(line.startswith("[w1] step=") for line in report.result.tail)
        assert any(line.startswith("step=") for line in report.result.tail)
        # A worker that fails ends the slice: the other one is not left training.
        report = asyncio.run(verifier.run_candidate(
            f"if [ $PORTSIDE_HOST_INDEX = 1 ]; then exit 3; fi; {BASE} --sleep-at 2 --sleep 300",
            project))
        assert report.result.exit_code == 3 and report.outcome == "failed-error"
        assert report.result.wall_s < 60
        assert sshd.processes_under_home() == other.processes_under_home() == []
        verifier.executors["candidate"].close()
        assert (sshd.listing(), other.listing()) == homes
    finally:
        other.kill()


@pytest.mark.parametrize("transport", ["rsync", "tar"])
def test_disk_full_on_the_host_is_an_outcome(tmp_path: Path, sshd: LoopbackSSHD,
                                             project: Path, transport: str) -> None:
    _need(transport)
    full = tmp_path / "full"
    full.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(full)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root with CAP_SYS_ADMIN)")
    try:
        big = tmp_path / "big-project"
        shutil.copytree(project, big)
        (big / "data.bin").write_bytes(os.urandom(256 * 1024))
        verifier, _ = _runner_parts(tmp_path)
        verifier.executors["candidate"] = SSHExecutor(
            f"ssh://root@127.0.0.1:{sshd.port}{full}", "sess-full", ssh_config=sshd.config,
            transport=transport)
        report = asyncio.run(verifier.run_candidate(BASE, big))
        assert report.result.reason == "host-disk-full", report.result
        assert report.result.error_type == "HostDiskFull"
        assert "No space left on device" in report.result.error_message
        assert f"127.0.0.1:{sshd.port}" in report.result.error_message
        assert report.outcome == "failed-error"
        verifier.executors["candidate"].close()
        assert list(full.iterdir()) == []
    finally:
        subprocess.run(["umount", str(full)], check=False)


# Rewrites note.txt in place, same size, mtime put back: only a checksum sees it. In a run made
# of hard links to the host's mirror, this changes the mirror too; the next run must not see it.
_POISON = ("import os; s = os.stat('note.txt'); f = open('note.txt', 'r+'); f.write('XXXXXXX'); "
           "f.close(); os.utime('note.txt', (s.st_atime, s.st_mtime))")


@pytest.mark.parametrize("transport", ["rsync", "tar"])
def test_each_transport_ships_every_attempt_as_it_is(tmp_path: Path, sshd: LoopbackSSHD,
                                                     transport: str) -> None:
    _need(transport)
    proj = tmp_path / "proj"
    (proj / ".git").mkdir(parents=True)
    (proj / ".git" / "HEAD").write_text("ref: refs/heads/main\n")  # never shipped
    (proj / "data.bin").write_bytes(os.urandom(2 << 20))
    (proj / "note.txt").write_text("attempt 1\n")
    before = sshd.listing()
    verifier, _ = _runner_parts(tmp_path)
    executor = SSHExecutor(ALIAS, f"sess-{transport}", ssh_config=sshd.config,
                           transport=transport)
    verifier.executors["candidate"] = executor
    command = f"cat note.txt; sha256sum data.bin; ls -A; {PY} -c \"{_POISON}\""
    data_sha = hashlib.sha256((proj / "data.bin").read_bytes()).hexdigest()
    tails = []
    for note in ("attempt 1", "attempt 2", None):  # the third attempt changes nothing
        if note is not None:
            (proj / "note.txt").write_text(f"{note}\n")
        report = asyncio.run(verifier.run_candidate(command, proj))
        assert report.result.exit_code == 0, report.result
        tails.append(report.result.tail)
    assert [t[0] for t in tails] == ["attempt 1", "attempt 2", "attempt 2"]
    for tail in tails:
        assert tail[1].startswith(data_sha)
        assert sorted(tail[2:]) == ["data.bin", "note.txt"]  # no .git
    sent = [s["bytes"] for s in executor.shipped]
    assert [s["transport"] for s in executor.shipped] == [transport] * 3
    assert sent[0] > 2 << 20
    if transport == "rsync":  # the mirror on the host: a one-file change sends about that file
        assert sent[1] < 64 << 10 and sent[2] < 64 << 10, sent
    else:
        assert sent[1] > 2 << 20
    executor.close()
    assert sshd.listing() == before


def test_auto_transport_falls_back_to_tar_without_rsync_here(
        tmp_path: Path, sshd: LoopbackSSHD, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    only_ssh = tmp_path / "bin"
    only_ssh.mkdir()
    (only_ssh / "ssh").symlink_to(shutil.which("ssh") or "/usr/bin/ssh")
    monkeypatch.setenv("PATH", str(only_ssh))
    monkeypatch.delenv("PORTSIDE_SSH_TRANSPORT", raising=False)
    verifier, _ = _runner_parts(tmp_path)
    executor = SSHExecutor(ALIAS, "sess-norsync", ssh_config=sshd.config)
    verifier.executors["candidate"] = executor
    report = asyncio.run(verifier.run_candidate("/usr/bin/cat train_tiny.py", project))
    assert report.result.exit_code == 0
    assert report.result.tail[-1] in (project / "train_tiny.py").read_text()
    assert executor.transport == "tar"
    executor.close()
    monkeypatch.setenv("PATH", str(only_ssh))
    with pytest.raises(ValueError, match="PORTSIDE_SSH_TRANSPORT"):
        SSHExecutor(ALIAS, "x", transport="scp")


def test_a_login_that_prints_picks_tar_and_still_runs(tmp_path: Path, project: Path) -> None:
    """A host whose login prints (a chatty ~/.bashrc) breaks rsync's protocol: tar, not a hang."""
    server = _start_sshd(tmp_path / "sshd")
    try:
        (server.home / ".bashrc").write_text("echo welcome to the host\n")
        before = server.listing()
        verifier, _ = _runner_parts(tmp_path)
        executor = SSHExecutor(ALIAS, "sess-noisy", ssh_config=server.config, transport="auto")
        verifier.executors["candidate"] = executor
        report = asyncio.run(verifier.run_candidate("echo ran", project))
        assert report.result.exit_code == 0 and report.result.tail[-1] == "ran", report.result
        assert executor.transport == "tar"
        executor.close()
        assert server.listing() == before
        if shutil.which("rsync"):
            verifier.executors["candidate"] = forced = SSHExecutor(
                ALIAS, "sess-noisy2", ssh_config=server.config, transport="rsync")
            report = asyncio.run(verifier.run_candidate("echo ran", project))
            assert report.result.reason == "remote-error"
            assert "rsync needs a clean shell" in report.result.error_message
            forced.close()
            _until(lambda: server.listing() == before, 5)
            assert server.listing() == before
    finally:
        server.kill()
