"""A study task that waits for a reviewer (`policy = "ask"`), decided from another process
while the rest of the study goes on.

A real `portside study run` runs two tasks, two phases at once, on each engine: the embedded
one (worker processes here) and Ray (a real local cluster; the decisions reach the worker
through its phase's mailbox actor): a scripted agent whose edit and claim wait for a reviewer,
and a verification. The reviewer's side is the
one `portside study review` opens (cli/study_review.py's Follower: the session's events from the
database, a RemoteGate whose decisions go through the study run's relay to the worker). The
status says "waiting for a reviewer" while the verification finishes; the edit is approved, the
claim given its verdict, and both decisions are in the study's one database as interventions,
written by its one writer, with the reviewer's name; seqs gap-free.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from cli_run import cli, cli_popen
from ray_cluster import LocalRayCluster, ray_env

# A whole study: three short torch runs and two worker processes on a shared machine (and,
# with ray, a real local cluster). A hang fails at the timeout, saying what it waited for.
pytestmark = [pytest.mark.slow, pytest.mark.heavy, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "sessions" / "study" / "tiny"
DEADLINE_S = 240  # each wait, inside the test's timeout


def _status(study: Path, db: Path) -> dict[str, dict]:
    out = cli("study", "status", str(study), "--json", db=db, env=ray_env(), timeout=120)
    assert out.returncode == 0, out.stderr
    return {t["task_id"]: t for t in json.loads(out.stdout)["tasks"]}


def _until(what: str, head: subprocess.Popen, check) -> None:  # type: ignore[type-arg]
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        if check():
            return
        if head.poll() is not None:
            raise AssertionError(f"study run ended ({head.returncode}) while waiting for "
                                 f"{what}: {head.communicate()[1][-2000:]}")
        time.sleep(0.5)
    raise AssertionError(f"no {what} within {DEADLINE_S} s")


def _verdict_when_claimed(f: Any, head: subprocess.Popen) -> Any:  # type: ignore[type-arg]
    """Wait for the agent's closing claim to reach the follower, then pass it."""
    _until("the claim waiting", head, lambda: (f.catch_up(), f.gate.pending_claim())[1]
           is not None)
    return f.gate.verdict("pass", "logging only")


@contextlib.contextmanager
def _reaped(head: subprocess.Popen) -> Iterator[subprocess.Popen]:  # type: ignore[type-arg]
    """The study run, killed on the way out if the test left it running."""
    try:
        yield head
    finally:
        if head.poll() is None:
            head.kill()
            head.wait()


async def _press_approve(app: Any) -> None:
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("a")  # returns once the intervention is in the database
        await pilot.pause()
        await pilot.press("q")  # the review ends; the session goes on


@pytest.fixture(params=["local", "ray"])
def engine(request: pytest.FixtureRequest) -> Iterator[list[str]]:
    """The `study run` flags of each engine; ray: a head on 127.0.0.1 with two CPUs."""
    if request.param == "local":
        yield []
        return
    pytest.importorskip("ray")
    cluster = LocalRayCluster(ray_env())
    try:
        yield ["--launcher", "ray", "--address", cluster.address]
    finally:
        cluster.close()


OLD = 'p.add_argument("--log-every", type=int, default=1)'


def _start(tmp: Path, engine: list[str], verified: bool = True
           ) -> tuple[Path, Path, subprocess.Popen]:  # type: ignore[type-arg]
    """A `study run` of the asking task (one edit, then a claim) and, with ``verified``, a
    verification; returned once it has made its database (`status` must not race that)."""
    assert OLD in (TINY / "train.py").read_text()
    script = tmp / "agent.jsonl"
    script.write_text("\n".join(json.dumps(x) for x in [
        {"edit": {"path": "train.py", "old": OLD, "new": OLD.replace("default=1", "default=5"),
                  "rationale": "log every 5th step"}},
        {"claim": "ported: only the logging changed"},
    ]) + "\n")
    study = tmp / "study.toml"
    study.write_text(f"""\
[study]
name = "review"
[defaults]
path = "{TINY}"
reference = "python train.py --steps 20"
target = "cpu"
reference_runs = 1
[[project]]
name = "asked"
agent = "scripted:{script}"
policy = "ask"
""" + ("""[[project]]
name = "verified"
candidate = "python train.py --steps 20"
""" if verified else ""))
    db = tmp / "s.db"
    head = cli_popen("study", "run", str(study), "--parallel", "2", *engine, db=db,
                     env=ray_env())
    # Ray's "\tINFO ..." lines of connecting come before the study's own first line.
    assert head.stderr is not None
    said: list[str] = []
    while not any(" tasks, launcher " in line for line in said):
        said.append(head.stderr.readline())
        if not said[-1]:
            head.kill()
            raise AssertionError(f"study run ended before it started: {''.join(said)}")
    return study, db, head


def _rows(db: Path) -> dict[str, list[tuple[int, str, dict]]]:
    """Each session's events from the database (checked sound, gap-free), in seq order."""
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        rows = conn.execute("SELECT session_id, seq, kind, body FROM events ORDER BY session_id, "
                            "seq").fetchall()
    finally:
        conn.close()
    by: dict[str, list[tuple[int, str, dict]]] = {}
    for s, seq, kind, body in rows:
        by.setdefault(s, []).append((seq, kind, json.loads(body)))
    for s, evs in by.items():
        assert [seq for seq, _, _ in evs] == list(range(1, len(evs) + 1)), s
    return by


def test_reviewer_decides_a_waiting_task_while_the_study_goes_on(tmp_path: Path,
                                                                 engine: list[str]) -> None:
    from portside.cli.study_review import Follower, review_relay
    from portside.core.study.review_relay import RelayError, send_decision
    from portside.store.queries import Store

    study, db, head = _start(tmp_path, engine)
    with _reaped(head):
        # The asked task waits for its edit's decision while the verification finishes.
        _until("the edit waiting and the verification done", head, lambda: (
            lambda s: s.get("asked", {}).get("state") == "waiting for a reviewer"
            and s.get("verified", {}).get("state") == "done")(_status(study, db)))
        store = Store(db)
        try:
            sid = _status(study, db)["asked"]["session_id"]
            relay = review_relay(store, sid)
            assert relay is not None and relay.stat().st_mode & 0o077 == 0  # owner only
            f = Follower(store, sid, relay)
            f.gate.reviewer = "rita"
            (edit,) = f.gate.pending_edits()
            # The keyboard path: `a` on the review screen (the one `study review` opens).
            asyncio.run(_press_approve(f.app()))
            (approved,) = [e for e in store.events(sid, kinds=["intervention"])]
            assert (approved.action, approved.target_id, approved.reviewer) == (
                "approve", edit.item_id, "rita")
            # A decision nothing waits for any more is refused, said, not recorded twice.
            with pytest.raises(RelayError, match="not waiting for a decision"):
                send_decision(relay, {"session": sid, "action": "approve",
                                      "target": edit.item_id})
            _until("the claim waiting", head, lambda: (f.catch_up(), f.gate.pending_claim())[1]
                   is not None)
            t0 = time.perf_counter()
            verdict = f.gate.verdict("pass", "logging only")
            # reviewer -> relay -> worker's gate -> head's writer -> database, and read back
            print(f"decision round trip {time.perf_counter() - t0:.3f} s, load "
                  f"{os.getloadavg()[0]:.1f}")
            assert (verdict.action, verdict.verdict, verdict.reviewer) == ("verdict", "pass",
                                                                          "rita")
        finally:
            store.close()
        out, err = head.communicate(timeout=DEADLINE_S)
    assert head.returncode == 0, err

    by = _rows(db)
    asked = by[sid]
    (other,) = [v for k, v in by.items() if k != sid]
    # Where the worker ran: a Ray node (the Ray task gives the worker its node's id) or here.
    placed = [b["detail"] for _, k, b in asked if k == "session.state"
              and b["state"] == "study-placed"]
    assert placed and all(("(node " in d) == bool(engine) for d in placed), placed
    kinds = [k for _, k, _ in asked]
    assert kinds.count("edit.applied") == 1 and kinds.count("agent.claimed") == 1
    inter = [b for _, k, b in asked if k == "intervention"]
    assert [(i["action"], i["reviewer"]) for i in inter] == [("approve", "rita"),
                                                             ("verdict", "rita")]
    decided = [b for _, k, b in asked if k == "edit.decided"]
    assert [(d["decision"], d["by"]) for d in decided] == [("approved", "reviewer")]
    end = [b for _, k, b in asked if k == "session.ended"][-1]
    assert (end["verdict"], end["reason"]) == ("pass", "reviewer: logging only")
    # The other task of the study had ended before anyone decided the waiting one's card.
    other_end = [b for _, k, b in other if k == "session.ended"][-1]
    assert other_end["verdict"] == "pass"
    assert other_end["ts"] < inter[0]["decided_at"]


def _mailboxes(cluster: LocalRayCluster) -> list[psutil.Process]:
    """The mailbox actors' processes of this cluster only (others may run one here)."""
    found = []
    for p in psutil.Process(cluster.head.pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if "ray::Mailbox" in " ".join(p.cmdline()):
                found.append(p)
    return found


def test_a_lost_mailbox_ends_the_phase_and_the_next_one_takes_the_decision(
        tmp_path: Path) -> None:
    """Ray: the mailbox of a phase whose edit waits is SIGKILLed. The phase must end as lost
    (not hang), run again from the log with a new mailbox, and the decision then go through."""
    pytest.importorskip("ray")
    from portside.cli.study_review import Follower, review_relay
    from portside.store.queries import Store

    cluster = LocalRayCluster(ray_env())
    try:
        study, db, head = _start(tmp_path, ["--launcher", "ray", "--address", cluster.address],
                                 verified=False)
        with _reaped(head):
            _until("the edit waiting", head, lambda: _status(study, db).get(
                "asked", {}).get("state") == "waiting for a reviewer")
            (mailbox,) = _mailboxes(cluster)
            mailbox.kill()
            _until("the phase run again", head, lambda: any(
                k == "session.state" and b["state"] == "study-retry"
                for evs in _rows(db).values() for _, k, b in evs))
            _until("the edit waiting again", head, lambda: _status(study, db).get(
                "asked", {}).get("state") == "waiting for a reviewer")
            # The phase run again has a mailbox of its own (its actor starts as the phase does).
            _until("the new phase's mailbox", head, lambda: len(_mailboxes(cluster)) == 1)
            assert mailbox.pid not in {p.pid for p in _mailboxes(cluster)}
            store = Store(db)
            try:
                sid = _status(study, db)["asked"]["session_id"]
                relay = review_relay(store, sid)
                assert relay is not None
                f = Follower(store, sid, relay)
                f.gate.reviewer = "rita"
                f.gate.approve(f.gate.pending_edits()[0].item_id, "after the mailbox was lost")
                _verdict_when_claimed(f, head)
            finally:
                store.close()
            _, err = head.communicate(timeout=DEADLINE_S)
    finally:
        cluster.close()
    assert head.returncode == 0, err
    (asked,) = _rows(db).values()
    retries = [b["detail"] for _, k, b in asked if k == "session.state"
               and b["state"] == "study-retry"]
    assert len(retries) == 1 and "reviewer mailbox was lost" in retries[0], retries
    inter = [(b["action"], b["reviewer"]) for _, k, b in asked if k == "intervention"]
    assert inter == [("approve", "rita"), ("verdict", "rita")]
    kinds = [k for _, k, _ in asked]
    assert kinds.count("edit.applied") == 1
    end = [b for _, k, b in asked if k == "session.ended"][-1]
    assert (end["verdict"], end["reason"]) == ("pass", "reviewer: logging only")


async def _keys(app: Any, *keys: str, then: Any = None, dialog: type | None = None) -> None:
    """Keys on the review screen at 120x40; with ``dialog``, ``then(screen)`` fills it."""
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press(*keys)
        if dialog is not None:
            deadline = time.monotonic() + 60
            while not isinstance(app.screen, dialog):
                assert time.monotonic() < deadline, f"no {dialog.__name__} opened"
                await pilot.pause(0.05)
            await then(pilot, app.screen)
        await pilot.pause()
        await pilot.press("q")


def test_message_pause_and_edit_from_a_study_review(tmp_path: Path) -> None:
    """`m`, space and `e` on a study session's review screen (local engine): each is recorded
    by the worker's own gate, under the reviewer's name, and the reviewer's edit is the text
    the session's copy of the project ends with."""
    from textual.widgets import TextArea

    from portside.cli.study_review import Follower, review_relay
    from portside.store.queries import Store
    from portside.tui.screens.dialogs import EditDialog, TextDialog

    async def message(pilot: Any, screen: Any) -> None:
        await pilot.press(*"keep-the-loss-logged", "enter")

    async def edit(pilot: Any, screen: Any) -> None:
        area = screen.query_one(TextArea)
        assert "default=5" in area.text  # the agent's proposal, to change
        area.load_text(area.text.replace("default=5", "default=7"))
        await pilot.press("ctrl+s")

    study, db, head = _start(tmp_path, [], verified=False)
    with _reaped(head):
        _until("the edit waiting", head, lambda: _status(study, db).get(
            "asked", {}).get("state") == "waiting for a reviewer")
        store = Store(db)
        try:
            sid = _status(study, db)["asked"]["session_id"]
            relay = review_relay(store, sid)
            assert relay is not None

            def follower() -> Follower:
                f = Follower(store, sid, relay)
                f.gate.reviewer = "rita"
                return f

            asyncio.run(_keys(follower().app(), "m", dialog=TextDialog, then=message))
            asyncio.run(_keys(follower().app(), "space"))
            assert follower().gate.paused  # the engine's gate said so, in the log
            asyncio.run(_keys(follower().app(), "space"))
            assert not follower().gate.paused
            asyncio.run(_keys(follower().app(), "e", dialog=EditDialog, then=edit))
            _verdict_when_claimed(follower(), head)
        finally:
            store.close()
        _, err = head.communicate(timeout=DEADLINE_S)
    assert head.returncode == 0, err
    (asked,) = _rows(db).values()
    inter = [(b["action"], b["reviewer"]) for _, k, b in asked if k == "intervention"]
    assert inter == [(a, "rita") for a in ("message", "pause", "resume", "edit", "verdict")]
    (msg,) = [b for _, k, b in asked if k == "intervention" and b["action"] == "message"]
    assert msg["note"] == "keep-the-loss-logged"
    states = [b["state"] for _, k, b in asked if k == "session.state"]
    assert states.index("paused") < len(states) - states[::-1].index("running") - 1
    (decided,) = [b for _, k, b in asked if k == "edit.decided"]
    assert decided["decision"] == "edited"
    # The project's copy the session worked in ends with the reviewer's text, not the agent's.
    copies = [p.read_text() for p in (tmp_path / "work").rglob("train.py")]
    assert any(OLD.replace("default=1", "default=7") in c for c in copies), len(copies)
    assert not any(OLD.replace("default=1", "default=5") in c for c in copies)
