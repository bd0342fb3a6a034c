"""What a sandboxed run can reach (issue 38, items 1, 8 and 14), as root, through real
bubblewrap and the real runner: its own workspace and probe folder, the Python it runs and the
system, nothing of portside's (a database wherever ``--db`` put it, other sessions' folders) or
of another study task's; a read-only /dev that holds only the standard nodes and the host's
real accelerator nodes; /dev/shm sized by ``tmp_size_fraction``; a fork bomb that exits 0 still
ends ``resource-limit``."""

from __future__ import annotations

import asyncio
import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_run import cli
from host_folder import host_folder

from portside.core.log import events as ev
from portside.core.run.limits import Limits, mechanism
from portside.core.run.runner import Runner, RunResult, RunSpec
from portside.core.run.sandbox import Sandbox, unavailable

PY = sys.executable
pytestmark = [
    pytest.mark.skipif(unavailable() is not None, reason=f"no sandbox here: {unavailable()}"),
    pytest.mark.skipif(os.geteuid() != 0, reason="the attacks need root (CI runs as root)"),
]
needs_cgroup = pytest.mark.skipif(mechanism() == "rlimit", reason="no cgroup can be made here")


@pytest.fixture
def srv() -> Iterator[Path]:
    """A host directory outside /tmp, the home and any git repo (as `--db /srv/x/...` is):
    before the allow-list only the read-only root stood between a run and it."""
    with host_folder() as where:
        yield where


def _run(sb: Sandbox, command: str, cwd: Path, probe: Path, timeout: float = 120) -> RunResult:
    runner = Runner("s", lambda e: None, probe)
    runner.use_sandbox(sb)
    return asyncio.run(runner.run(RunSpec("r1", "candidate", 1, command, cwd, "cpu",
                                          timeout_s=timeout)))


def _said(res: RunResult, tag: str) -> dict[str, str]:
    return {line.split()[1]: line.split(" ", 2)[2] for line in res.tail
            if line.startswith(tag + " ")}


# --- item 8: a run sees its own folders, the Python and the system, nothing of portside's ---

READ = """
import glob, os, sys
def look(name, path):
    try:
        if os.path.isdir(path):
            print("SEE", name, "dir", sorted(os.listdir(path)), flush=True)
        else:
            print("SEE", name, "file", open(path, "rb").read(40), flush=True)
    except OSError as e:
        print("SEE", name, "refused", e.errno, flush=True)
for name, path in {targets}:
    look(name, path)
import torch  # the Python and its packages are there
probe = os.path.dirname(os.environ["PORTSIDE_PROBE_OUT"])
print("OWN workspace", sorted(os.listdir(".")), flush=True)
print("OWN probe", os.path.isdir(probe) and os.access(probe, os.W_OK), flush=True)
print("OWN torch", torch.__version__, flush=True)
print("OWN etc", os.path.exists("/etc/passwd"), flush=True)
"""


def test_a_run_reaches_nothing_of_portside_nor_of_another_task(srv: Path) -> None:
    """The database beside `--db /srv/x/portside.db` (with -wal, -shm), another session's
    folder in the same work root, another study task's project and the study database: all
    readable by the run before (only the home, /tmp and the work root were hidden)."""
    db_dir, other_task = srv / "x", srv / "tasks" / "other"
    db_dir.mkdir()
    for suffix in ("", "-wal", "-shm"):
        (db_dir / f"portside.db{suffix}").write_bytes(b"SQLite format 3\0 reference records")
    (srv / "study.db").write_bytes(b"SQLite format 3\0 study")
    other_task.mkdir(parents=True)
    (other_task / "train.py").write_text("SECRET_SOURCE = 1\n")
    work = db_dir / "work"  # as the CLI puts it: beside the database
    own, other = work / "s-own", work / "s-other"
    (other / "workspaces" / "s-other" / "tree").mkdir(parents=True)
    (other / "workspaces" / "s-other" / "tree" / "train.py").write_text("OTHER_SESSION = 1\n")
    tree = own / "workspaces" / "s-own" / "tree"
    tree.mkdir(parents=True)
    project = srv / "tasks" / "mine"
    project.mkdir()
    targets = [("db", db_dir / "portside.db"), ("wal", db_dir / "portside.db-wal"),
               ("shm", db_dir / "portside.db-shm"), ("db-dir", db_dir),
               ("other-session", other / "workspaces" / "s-other" / "tree" / "train.py"),
               ("work-root", work), ("other-task", other_task / "train.py"),
               ("tasks", srv / "tasks"), ("study-db", srv / "study.db"), ("srv", srv)]
    (tree / "look.py").write_text(READ.format(targets=[(n, str(p)) for n, p in targets]))
    sb = Sandbox.for_project(project, work).with_writable(tree)
    res = _run(sb, f"{PY} look.py", tree, own / "probe", timeout=180)
    assert res.reason == "exit" and res.exit_code == 0, res.tail
    seen = _said(res, "SEE")
    assert set(seen) == {n for n, _ in targets}, res.tail
    # The folders on the way to the run's own are there, empty but for that way (the mount
    # points of its binds); nothing else is there at all (ENOENT).
    way = {"srv": "dir ['x']", "db-dir": "dir ['work']", "work-root": "dir ['s-own']"}
    for name, what in seen.items():
        assert what == way.get(name, "refused 2"), (name, what)
    own_ = _said(res, "OWN")
    assert own_["workspace"] == "['look.py']" and own_["probe"] == "True", res.tail
    assert own_["etc"] == "True" and own_["torch"][0].isdigit(), res.tail


# --- item 1: /dev read-only, only the standard nodes and the host's accelerators ----------

DEV = """
import os, stat
try:
    open("/dev/accel0", "w").write("fake")
    print("DEV accel0 created", flush=True)
except OSError as e:
    print("DEV accel0 refused", e.errno, flush=True)
try:
    os.mkfifo("/dev/vfio-fake")
    print("DEV fifo created", flush=True)
except OSError as e:
    print("DEV fifo refused", e.errno, flush=True)
print("DEV nodes", " ".join(sorted(os.listdir("/dev"))), flush=True)
open("/dev/shm/x", "wb").write(b"x" * 4096)
print("DEV shm writable", flush=True)
s = os.statvfs("/dev/shm")
print("DEV shm-size", s.f_blocks * s.f_frsize, flush=True)
try:
    with open("/dev/fill", "wb") as fh:
        for _ in range(64):
            fh.write(b"x" * (1 << 20))
    print("DEV fill wrote 64 MiB", flush=True)
except OSError as e:
    print("DEV fill refused", e.errno, flush=True)
"""
STANDARD = {"null", "zero", "full", "random", "urandom", "tty", "shm", "pts", "ptmx", "fd",
            "stdin", "stdout", "stderr", "core", "console"}
ACCEL = ("nvidia", "accel", "vfio", "dri", "kfd", "infiniband")


def test_dev_is_read_only_with_standard_nodes_and_shm_sized(tmp_path: Path) -> None:
    """Item 1's fake TPU node (a regular file made as /dev/accel0) and item 14a's /dev of
    half the RAM: on the old profile /dev was a writable tmpfs, the file was made and 64 MiB
    went into it past a 16 MiB tmp_size."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "dev.py").write_text(DEV)
    sb = Sandbox.for_project(tmp_path / "proj", limits=Limits(tmp_size=16 << 20))
    res = _run(sb.with_writable(ws), f"{PY} dev.py", ws, tmp_path / "probe")
    assert res.reason == "exit" and res.exit_code == 0, res.tail
    dev = _said(res, "DEV")
    assert dev["accel0"] == "refused 30" and dev["fifo"] == "refused 30", dev  # EROFS
    assert dev["fill"] == "refused 30", dev
    nodes = set(dev["nodes"].split())
    extra = {n for n in nodes - STANDARD if not n.startswith(ACCEL)}
    assert not extra, extra
    host_accel = {n for n in os.listdir("/dev") if n.startswith(ACCEL)}
    assert {n for n in nodes if n.startswith(ACCEL)} == host_accel  # the host's, if any
    assert dev["shm"] == "writable"
    assert int(dev["shm-size"]) == 16 << 20  # tmp_size_fraction, not half the RAM


LOADER = """
import torch
from torch.utils.data import DataLoader, TensorDataset
torch.set_num_threads(1)
data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in DataLoader(data, batch_size=8, num_workers=2):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
print("trained", float(loss), flush=True)
"""


@pytest.mark.slow  # torch with two loader worker processes
def test_dataloader_workers_train_with_a_read_only_dev(tmp_path: Path) -> None:
    """Loader workers pass tensors through /dev/shm: it stays writable under a read-only /dev."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "loader.py").write_text(LOADER)
    sb = Sandbox.for_project(tmp_path / "proj", limits=Limits.from_fractions(16384, 0.9, 0.25))
    res = _run(sb.with_writable(ws), f"{PY} loader.py", ws, tmp_path / "probe", timeout=300)
    assert res.reason == "exit" and res.exit_code == 0, res.tail
    assert any(line.startswith("trained ") for line in res.tail), res.tail
    assert res.steps == 8  # the probe saw every step


# --- item 14b: a fork bomb held by max_processes that exits 0 --------------------------------

BOMBS = {
    "python": textwrap.dedent("""
        import os, time
        n = 0
        try:
            while True:
                if os.fork() == 0:
                    time.sleep(30)
                    os._exit(0)
                n += 1
        except BlockingIOError as e:
            print("fork refused after", n, e, flush=True)
    """),
    "shell": "f() { f | f & }; f; sleep 3; echo bombed\n",
}


@needs_cgroup
@pytest.mark.parametrize("kind", sorted(BOMBS))
def test_a_fork_bomb_that_exits_0_ends_as_resource_limit(tmp_path: Path, kind: str) -> None:
    """Its main process catches the refusal (or a shell ignores it) and exits 0: the run was
    'failed-silent / no-metrics' before, the limit unnamed."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "bomb").write_text(BOMBS[kind])
    sb = Sandbox.for_project(tmp_path / "proj", limits=Limits(max_processes=40))
    cmd = f"{PY} bomb" if kind == "python" else "sh bomb"
    res = _run(sb.with_writable(ws), cmd, ws, tmp_path / "probe", timeout=60)
    assert res.reason == "resource-limit", (res.reason, res.exit_code, res.tail)
    assert "max_processes = 40" in res.error_message, res.error_message
    assert res.error_type == "ResourceLimit"


# --- item 8 end to end: the database beside --db, through the real CLI ---------------------

PEEK = """
import os
def attempt(name, fn):
    try:
        print("ATTACK", name, "->", fn(), flush=True)
    except Exception as e:
        print("ATTACK", name, "-> ERROR", type(e).__name__, e, flush=True)
for suffix in ("", "-wal", "-shm"):
    attempt("read-db" + suffix, lambda: len(open({db!r} + suffix, "rb").read()))
attempt("list-db-dir", lambda: sorted(os.listdir({dbdir!r})))
exec(open("train_tiny.py").read())
"""


def test_a_candidate_reads_no_database_beside_db(srv: Path, tmp_path: Path) -> None:
    """`portside run --db /srv/x/portside.db` under --policy auto, portside as root: the
    candidate read the whole database (the references' records too) before; now it is not
    there, and the candidate (the tiny trainer after its attempts) still trains."""
    import json

    from portside.store import Store

    tiny = Path(__file__).resolve().parents[1] / "fixtures" / "trainers" / "train_tiny.py"
    project = srv / "proj"
    project.mkdir()
    (project / "train.py").write_text(tiny.read_text())
    (project / "train_tiny.py").write_text(tiny.read_text())
    db = srv / "x" / "portside.db"
    db.parent.mkdir()
    body = PEEK.format(db=str(db), dbdir=str(db.parent))
    agent = tmp_path / "agent.jsonl"
    agent.write_text("\n".join(json.dumps(x) for x in [
        {"read": "train.py"},
        {"write": {"path": "train.py", "content": body, "rationale": "port"}},
        {"run": "candidate"}, {"claim": "ported"}]) + "\n")
    res = cli("run", str(project), "--target", "cpu", "--agent", f"scripted:{agent}",
              "--reference", f"{PY} train.py", "--reference-runs", "1", "--headless",
              "--policy", "auto", "--json", "--stall", "60", db=db, timeout=600,
              env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home"), "OMP_NUM_THREADS": "1"})
    assert res.returncode in (0, 1), res.stderr[-3000:]
    assert "runs in bubblewrap" in res.stderr, res.stderr[-3000:]
    sid = json.loads(res.stdout)["session"]
    with Store(db) as store:
        events = list(store.events(sid))
        runs = {r["run_id"]: r for r in store.runs(sid)}
    out = [line for e in events if isinstance(e, ev.RunOutput) for line in e.lines
           if line.startswith("ATTACK")]
    attacks = {line.split()[1]: line.split(" -> ", 1)[1] for line in out}
    assert set(attacks) == {"read-db", "read-db-wal", "read-db-shm", "list-db-dir"}, out
    for name in ("read-db", "read-db-wal", "read-db-shm"):
        assert attacks[name].startswith("ERROR FileNotFoundError"), attacks
    assert attacks["list-db-dir"] == "['work']", attacks  # only the way to its own folder
    cand = [r for r in runs.values() if r["role"] == "candidate"]
    refs = [r for r in runs.values() if r["role"] == "reference"]
    assert refs and refs[0]["outcome"] == "passed" and (refs[0]["steps"] or 0) > 0, refs
    assert cand and (cand[0]["steps"] or 0) > 0, cand  # it trained, in the sandbox


def test_criteria_readable_shows_a_data_folder_read_only(srv: Path, tmp_path: Path) -> None:
    """`[sandbox] readable`: what the allow-list takes away (a data set under /srv) is given
    back by name, read-only; a folder that would show the project whole ("/") is not, and
    the state line says so."""
    from portside.core.log.criteria import parse_criteria
    from portside.core.run.sandbox import session_sandbox

    data = srv / "data"
    data.mkdir()
    (data / "train.csv").write_text("1,2\n")
    project, tree = srv / "proj", tmp_path / "ws"
    project.mkdir()
    tree.mkdir()
    crit = parse_criteria(f'[sandbox]\nreadable = ["{data}", "/", "{srv}/none"]\n')
    c = session_sandbox(project, None, network=False, wanted=True, policy="auto",
                        has_agent=True, writable=[tree], readable=crit.sandbox.readable)
    assert c.sandbox is not None, c.detail
    assert f"and {data} (not /, {srv}/none: missing" in c.detail, c.detail
    (tree / "read.py").write_text(textwrap.dedent(f"""
        print("DATA", open({str(data / 'train.csv')!r}).read().strip(), flush=True)
        try:
            open({str(data / 'x')!r}, "w")
        except OSError as e:
            print("WRITE refused", e.errno, flush=True)
        import os
        print("PROJ", os.path.exists({str(project)!r}), flush=True)
    """))
    res = _run(c.sandbox, f"{PY} read.py", tree, tmp_path / "probe")
    assert res.exit_code == 0, res.tail
    assert "DATA 1,2" in res.tail and "WRITE refused 30" in res.tail, res.tail
    assert "PROJ False" in res.tail, res.tail
