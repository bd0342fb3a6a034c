"""Issue 40.1: references run on an SSH host are reused like local ones, keyed with the host's
facts (its interpreter and packages, its accelerators, its name).

Real `portside verify` processes on one database, the references on a real OpenSSH server on
a loopback port (tests/integration/loopback_sshd.py: this machine, reached through sshd, with
a home of its own). Each reference command stamps the ``$HOME`` it runs under into a counter
file before it trains: the file, not the log, says how many reference processes started, and
where (the host's home, or this machine's).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_run import cli
from loopback_sshd import ALIAS, LoopbackSSHD, why_not

REPO = Path(__file__).resolve().parents[2]
FAST = REPO / "tests" / "bench" / "fullsize_trainer.py"  # torch-free, sealed probe records

pytestmark = pytest.mark.skipif(bool(why_not()), reason=why_not() or "ok")


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Any:
    server = LoopbackSSHD(tmp_path_factory.mktemp("sshd")).start()
    yield server
    server.kill()


def _verify(db: Path, project: Path, reference: str, *extra: str,
            env_more: dict[str, str] | None = None) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "PORTSIDE_DB"} | (env_more or {})
    done = cli("verify", "--reference", reference, "--candidate", "true", "--target", "cpu",
               "--json", "--timeout", "120", *extra, db=db, cwd=project, env=env, timeout=300)
    assert done.returncode in (0, 1), done.stderr[-3000:]
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def _reused(out: dict[str, Any]) -> list[bool]:
    return [bool(r.get("reused_from")) for r in out["reference"]]


def _homes(counter: Path) -> list[str]:
    """The $HOME of every reference process started so far, in order."""
    return counter.read_text().splitlines() if counter.exists() else []


@pytest.mark.slow  # a dozen short real runs, most over ssh
def test_remote_references_are_reused_until_a_fact_of_the_host_changes(
        tmp_path: Path, sshd: LoopbackSSHD) -> None:
    project, db, counter = tmp_path / "project", tmp_path / "p.db", tmp_path / "count"
    project.mkdir()
    shutil.copy(FAST, project / "fast.py")
    # The host's interpreter: a venv of its own, so that a package can be installed into it
    # (a dist-info folder, as pip leaves one) without touching anyone else's.
    venv = tmp_path / "host-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    reference = f'echo "$HOME" >> {counter}; {venv}/bin/python -S fast.py 30 1 0 1000000 1'
    on_host = ("--reference-host", ALIAS, "--ssh-config", str(sshd.config))
    host, here = str(sshd.home), os.environ["HOME"]
    assert host != here

    first = _verify(db, project, reference, *on_host)
    assert _reused(first) == [False, False] and _homes(counter) == [host, host]
    assert [r["outcome"] for r in first["reference"]] == ["passed", "passed"]
    assert {r["host"] for r in first["reference"]} == {ALIAS}

    # The same project, command and host: copied from the store, no process on the host.
    second = _verify(db, project, reference, *on_host)
    assert _reused(second) == [True, True] and _homes(counter) == [host, host]
    assert [r["reused_from"]["run_id"] for r in second["reference"]] == \
        [r["run"] for r in first["reference"]]
    assert {r["reused_from"]["session"] for r in second["reference"]} == {first["session"]}
    assert {r["reused_from"]["host"] for r in second["reference"]} == {ALIAS}
    assert sshd.processes_under_home() == []
    assert not [p for p in sshd.listing() if p.startswith(".portside-")]
    # A variable of portside's own environment, which never goes to the host: the same runs.
    assert _reused(_verify(db, project, reference, *on_host,
                           env_more={"PORTSIDE_TEST_HERE_ONLY": "1"})) == [True, True]

    # A package installed into the host's interpreter: run again, there; then reused again.
    dist = site / "fakepkg-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fakepkg\nVersion: 1.0\n")
    assert _reused(_verify(db, project, reference, *on_host)) == [False, False]
    assert _homes(counter) == [host] * 4
    assert _reused(_verify(db, project, reference, *on_host)) == [True, True]
    # ... and another version of it.
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fakepkg\nVersion: 1.1\n")
    dist.rename(site / "fakepkg-1.1.dist-info")
    assert _reused(_verify(db, project, reference, *on_host)) == [False, False]
    assert _homes(counter) == [host] * 6

    # A variable the host's own login sets (its ~/.bashrc, which bash over ssh reads): the
    # run sees it, though portside never sent it: run again; then reused again, also with the
    # host's token rotated (a secret is keyed by its presence, masked).
    rc = "export XLA_FLAGS=--xla_cpu_enable_fast_math=false\nexport HF_TOKEN=hf_{}\n"
    (sshd.home / ".bashrc").write_text(rc.format("a" * 30))
    assert _reused(_verify(db, project, reference, *on_host)) == [False, False]
    assert _homes(counter) == [host] * 8
    (sshd.home / ".bashrc").write_text(rc.format("b" * 30))
    assert _reused(_verify(db, project, reference, *on_host)) == [True, True]

    # A changed project file (what is shipped to the host): run again.
    (project / "fast.py").write_text((project / "fast.py").read_text() + "\n# changed\n")
    assert _reused(_verify(db, project, reference, *on_host)) == [False, False]
    assert _homes(counter) == [host] * 10

    # Another host (here: this machine without ssh): the host's runs are not this one's.
    local = _verify(db, project, reference)
    assert _reused(local) == [False, False] and _homes(counter) == [host] * 10 + [here] * 2
    # Another host name (the same sshd by address): its own key, its own runs.
    by_address = ("--reference-host", f"ssh://root@127.0.0.1:{sshd.port}",
                  "--ssh-config", str(sshd.config))
    assert _reused(_verify(db, project, reference, *by_address)) == [False, False]
    assert _homes(counter) == [host] * 10 + [here] * 2 + [host] * 2
    # Unchanged, the host's latest runs are found again.
    assert _reused(_verify(db, project, reference, *on_host)) == [True, True]
    assert len(_homes(counter)) == 14
    assert sshd.processes_under_home() == []


@pytest.mark.slow  # short real runs over ssh
def test_a_host_that_cannot_say_its_facts_runs_the_reference(
        tmp_path: Path, sshd: LoopbackSSHD) -> None:
    """No key without the host's facts (its Python is gone): the reference runs, and is not
    found by a later verify (never a guess)."""
    project, db, counter = tmp_path / "project", tmp_path / "p.db", tmp_path / "count"
    project.mkdir()
    shutil.copy(FAST, project / "fast.py")
    on_host = ("--reference-host", ALIAS, "--ssh-config", str(sshd.config),
               "--reference-runs", "1")
    # The python the command names does not exist on the host; the shell falls back on another
    # one after it, so the run itself trains.
    reference = (f'echo "$HOME" >> {counter}; {tmp_path}/gone/python -S fast.py 30 1 0 1000000 1'
                 f' 2>/dev/null || {sys.executable} -S fast.py 30 1 0 1000000 1')
    for n in (1, 2):
        out = _verify(db, project, reference, *on_host)
        assert _reused(out) == [False] and [r["outcome"] for r in out["reference"]] == ["passed"]
        assert _homes(counter) == [str(sshd.home)] * n
