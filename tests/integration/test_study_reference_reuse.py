"""Issue 40.1 in a study: a task's references are reused from the study's database when a task
before it (or any session there) ran them with the same key, and the study's tables count
their compute once.

Real `portside study run` processes (the local launcher: a worker process a phase, no database
of their own) on one database. Each reference command stamps a line into a counter file
outside the project before it trains: the file, not the log, says how many reference
processes started.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_run import cli

from portside.core.log import events as ev
from portside.store import Store

REPO = Path(__file__).resolve().parents[2]
FAST = REPO / "tests" / "bench" / "fullsize_trainer.py"  # torch-free, sealed probe records
TRAIN = f"{sys.executable} -S fast.py 30 1 0 1000000 1"


def _manifest(tmp: Path, name: str, project: Path, counter: Path, tasks: list[str]) -> Path:
    path = tmp / f"{name}.toml"
    path.write_text(f"""\
[study]
name = "{name}"
[defaults]
path = "{project}"
reference = "echo x >> {counter}; {TRAIN}"
target = "cpu"
reference_runs = 2
""" + "".join(f'[[project]]\nname = "{t}"\ncandidate = "{TRAIN}"\n' for t in tasks))
    return path


def _study(db: Path, manifest: Path, *extra: str, env: dict[str, str] | None = None
           ) -> dict[str, Any]:
    done = cli("study", "run", str(manifest), "--parallel", "1", *extra, db=db, env=env,
               timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = cli("study", "report", str(manifest), "--format", "json", db=db, env=env)
    assert report.returncode == 0, report.stderr[-3000:]
    return json.loads(report.stdout)  # type: ignore[no-any-return]


def _references(store: Store, sid: str) -> list[ev.RunStarted]:
    return [e for e in store.events(sid) if isinstance(e, ev.RunStarted)
            and e.role == "reference"]


def _count(counter: Path) -> int:
    return len(counter.read_text().splitlines()) if counter.exists() else 0


@pytest.mark.slow  # two studies of short real runs, a worker process a phase
def test_a_study_reuses_references_and_counts_their_compute_once(tmp_path: Path) -> None:
    project, db, counter = tmp_path / "project", tmp_path / "s.db", tmp_path / "count"
    project.mkdir()
    shutil.copy(FAST, project / "fast.py")
    first = _study(db, _manifest(tmp_path, "reuse", project, counter, ["one", "two"]))
    # The second task's references were the first's: looked up by the worker, found by the
    # head, copied; no process started for them.
    assert _count(counter) == 2
    rows = {r["task"]: r for r in first["tasks"]}
    assert {r["verdict"] for r in rows.values()} == {"pass"}
    with Store(db) as store:
        one, two = (_references(store, rows[t]["session"]) for t in ("one", "two"))
        assert [bool(e.reused_from) for e in one] == [False, False]
        assert all(e.reuse_key for e in one)
        assert [e.reused_from.get("run_id") for e in two] == [e.run_id for e in one]
        assert {e.reused_from.get("session") for e in two} == {rows["one"]["session"]}
        # The ledger, which the study's tables fold: the copies cost nothing.
        led_one, led_two = (store.ledger(rows[t]["session"]) for t in ("one", "two"))
        assert all(led_one.runs[e.run_id].compute_usd > 0 for e in one)
        assert [led_two.runs[e.run_id].compute_usd for e in two] == [0.0, 0.0]
        cand_two = sum(r.compute_usd for r in led_two.runs.values() if r.role == "candidate")
    # The tables: the references' compute once, in the task that ran them.
    assert rows["two"]["compute_usd"] == pytest.approx(cand_two, abs=1e-6)
    assert rows["one"]["compute_usd"] > rows["two"]["compute_usd"]
    assert first["total"]["compute_usd"] == pytest.approx(
        rows["one"]["compute_usd"] + rows["two"]["compute_usd"], abs=1e-5)

    # Another study on the same database and project: reused again; with --fresh-references
    # run again (and keyed still).
    again = _study(db, _manifest(tmp_path, "again", project, counter, ["three"]))
    assert _count(counter) == 2 and again["tasks"][0]["verdict"] == "pass"
    fresh = _study(db, _manifest(tmp_path, "fresh", project, counter, ["four"]),
                   "--fresh-references")
    assert _count(counter) == 4
    with Store(db) as store:
        four = _references(store, fresh["tasks"][0]["session"])
    assert [bool(e.reused_from) for e in four] == [False, False] and all(e.reuse_key for e in four)
    # A changed project file: the next study's references run again.
    (project / "fast.py").write_text((project / "fast.py").read_text() + "\n# changed\n")
    _study(db, _manifest(tmp_path, "changed", project, counter, ["five"]))
    assert _count(counter) == 6


@pytest.mark.slow
@pytest.mark.heavy  # a real local Ray cluster
def test_on_ray_a_verification_phase_keys_its_references_and_runs_them(tmp_path: Path) -> None:
    """Ray carries lines to a phase only through an asking task's mailbox: a verification
    phase is not asked to look its references up (it would wait for an answer that cannot
    come), runs them, keyed for later sessions, and no phase is lost over it."""
    pytest.importorskip("ray")
    from ray_cluster import LocalRayCluster, ray_env

    project, db, counter = tmp_path / "project", tmp_path / "s.db", tmp_path / "count"
    project.mkdir()
    shutil.copy(FAST, project / "fast.py")
    cluster = LocalRayCluster(ray_env())
    try:
        out = _study(db, _manifest(tmp_path, "ray", project, counter, ["one", "two"]),
                     "--launcher", "ray", "--address", cluster.address, env=ray_env())
    finally:
        cluster.close()
    assert _count(counter) == 4 and out["total"]["retries"] == 0
    with Store(db) as store:
        refs = [e for r in out["tasks"] for e in _references(store, r["session"])]
    assert len(refs) == 4 and all(e.reuse_key and not e.reused_from for e in refs)
    # Keyed as the node ran them: Ray's own variables (OMP_NUM_THREADS=1 for a task of one
    # CPU) reach the run, so a local session's references are others.
    assert {e.reuse_key for e in refs[:2]} == {e.reuse_key for e in refs[2:]}
