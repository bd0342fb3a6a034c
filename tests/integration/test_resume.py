"""Kill -9 the engine mid-session, `portside run --resume SESSION`, the session finishes.

The first engine runs both references, has its edit approved by the reviewer, and is killed
while the candidate run is live (its command sleeps the first time). The resumed engine (the
real CLI, headless) must: keep every intervention, mark the cut-off run aborted and kill what it
left running, not redo the references, not ask about the approved edit again, run the candidate
again, and end the session after exactly one claim, with a gap-free log.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_run import cli, cli_in_process, cli_popen
from doubles import MemorySink

from portside.core.log import events as ev
from portside.store import Store

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "fixtures" / "trainers" / "train_tiny.py"
DRIVER = Path(__file__).with_name("resume_driver.py")
PY = sys.executable
ENV = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "ANTHROPIC_API_KEY": "sk-ant-never-stored"}


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is dead
    except FileNotFoundError:
        return False


def _wait_for(db: Path, sid: str, pidfile: Path, proc: subprocess.Popen[str]) -> None:
    """Until the candidate sleeps and the three interventions are committed."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the first engine ended before it could be killed"
        if pidfile.exists() and pidfile.read_text().strip():
            with Store(db) as store:
                if len(store.interventions(sid)) >= 3:
                    return
        time.sleep(0.2)
    raise AssertionError("the session never reached its candidate run")


@pytest.mark.slow  # a real session killed mid-run, then resumed
def test_killed_session_resumes_and_loses_nothing(tmp_path: Path) -> None:
    project = tmp_path / "tiny-project"
    project.mkdir()
    shutil.copy(TINY, project / "train.py")
    script = tmp_path / "agent.jsonl"
    script.write_text("\n".join(json.dumps(x) for x in [
        {"say": "Porting train.py."},
        {"read": "train.py"},
        {"edit": {"path": "train.py", "old": "A tiny, parametrisable training script",
                  "new": "A tiny, parametrisable (ported) training script"}},
        {"run": "candidate"},
        {"claim": "Ported; the candidate passed with no alarm."},
    ]) + "\n")
    db = tmp_path / "s.db"
    marker, pidfile = tmp_path / "slept", tmp_path / "sleeper.pid"
    train = f"{shlex.quote(PY)} train.py"
    # The first candidate run sleeps (the engine is killed meanwhile); the next one trains.
    candidate = (f"if [ ! -e {marker} ]; then touch {marker}; echo $$ > {pidfile}; sleep 300; "
                 f"fi; {train}")
    proc = subprocess.Popen([PY, str(DRIVER), str(db), str(project), str(script), train,
                             candidate], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=ENV)
    try:
        assert proc.stdout is not None
        sid = proc.stdout.readline().strip()
        _wait_for(db, sid, pidfile, proc)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    sleeper = int(pidfile.read_text())
    assert _alive(sleeper)  # kill -9 left the run behind: resume must deal with it
    with Store(db) as store:
        before = store.interventions(sid)
        seq_before = store.event_count(sid)
        assert not any(isinstance(e, ev.SessionEnded) for e in store.events(sid))
    assert sorted(i["action"] for i in before) == ["approve", "message", "note"]

    res = cli("run", "--resume", sid, "--headless", "--json", db=db, env=ENV)
    assert res.returncode == 0, res.stderr[-3000:]
    data = json.loads(res.stdout)
    assert data["session"] == sid and data["verdict"] == "pass"
    assert not _alive(sleeper)

    with Store(db) as store:
        events = list(store.events(sid))
        kinds = [e.__struct_config__.tag for e in events]
        assert [e.seq for e in events] == list(range(1, len(events) + 1))  # gap-free
        assert len(events) > seq_before
        assert kinds.count("session.ended") == 1 and store.session(sid)["verdict"] == "pass"
        # Every intervention made before the kill is still there, unchanged.
        after = {i["intervention_id"]: i for i in store.interventions(sid)}
        for i in before:
            assert after[i["intervention_id"]] == i
        runs = store.runs(sid)
        refs = [r for r in runs if r["role"] == "reference"]
        cands = [r for r in runs if r["role"] == "candidate"]
        assert [r["outcome"] for r in refs] == ["passed", "passed"]  # not run again
        assert [r["outcome"] for r in cands] == ["aborted", "passed"]
        finished = {e.run_id: e for e in events if isinstance(e, ev.RunFinished)}
        assert finished[cands[0]["run_id"]].reason == "engine-killed"
        # The approved edit was applied once and not proposed again; the agent went on.
        assert kinds.count("edit.proposed") == 1 and kinds.count("edit.applied") == 1
        assert kinds.count("agent.claimed") == 1
        states = [e.state for e in events if isinstance(e, ev.SessionState)]
        assert "resumed" in states
        calls = [e.name for e in events if isinstance(e, ev.AgentToolCall)]
        assert calls == ["read_file", "propose_edit", "run_candidate", "run_candidate", "finish"]
        started = next(e for e in events if isinstance(e, ev.SessionStarted))
        workdir = Path(started.meta["resume"]["workdir"])
        assert workdir == (tmp_path / "work" / sid).resolve()
        assert "ported" in (workdir / "workspaces" / sid / "tree" / "train.py").read_text()
        assert "sk-ant-never-stored" not in "\n".join(store.event_bodies(sid))
    assert "ported" not in (project / "train.py").read_text()  # the user's tree untouched
    assert os.path.exists(db)


# --- the pieces, without runs -----------------------------------------------------------------


def _intervention(action: str, note: str) -> ev.Intervention:
    return ev.Intervention(session_id="s", intervention_id=ev.new_id("i-"), action=action,  # type: ignore[arg-type]
                           steering=False, attention_started_at=1.0, decided_at=2.0, note=note)


def test_resume_refuses_ended_unknown_and_old_sessions(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    with Store(db) as store:
        rec = store.recorder
        rec.append(ev.SessionStarted(session_id="ended-1", project="/p", target="cpu",
                                     meta={"resume": {"version": 1}}))
        rec.append(ev.SessionEnded(session_id="ended-1", verdict="fail", reason="no candidate"))
        rec.append(ev.SessionStarted(session_id="old-1", project="/p", target="cpu"))
        rec.flush()
    cases = {"ended-1": "already ended (verdict fail: no candidate)", "nope": "no session matches",
             "old-1": "recorded without the data resuming needs"}
    for ref, says in cases.items():
        res = cli_in_process("run", "--resume", ref, "--headless", db=db)
        assert res.returncode == 2 and says in res.stderr, (ref, res.stderr)


def test_started_meta_rebuilds_the_engine_without_secrets(tmp_path: Path) -> None:
    from portside.core.agent.scripted import ScriptedAgent
    from portside.core.log.criteria import Criteria, load_criteria
    from portside.core.session.config import SessionConfig
    from portside.core.session.engine import SessionEngine
    from portside.core.session.resume import engine_from_log

    (tmp_path / "p").mkdir()
    crit = tmp_path / "c.toml"
    crit.write_text('[budget]\nmax_attempts = 3\n[prices]\n"human-hour" = 80.0\n')
    script = tmp_path / "a.jsonl"
    script.write_text('{"claim": "done"}\n')
    config = SessionConfig(
        project=tmp_path / "p", target="cpu", reference_command="python train.py",
        criteria=load_criteria(crit), criteria_path=str(crit), reference_runs=3,
        timeout_s=60, stall_s=9, agent=ScriptedAgent(script, speed=2), policy="runs-only",
        isolate=True, work_root=tmp_path / "work",
        candidate_env={"PJRT_DEVICE": "CPU", "ANTHROPIC_API_KEY": "sk-secret", "X_TOKEN": "t"},
    )
    sink = MemorySink()
    engine = SessionEngine(config, sink)
    assert engine.workdir == tmp_path / "work" / engine.session_id
    engine._started()
    started = sink.events[0]
    assert isinstance(started, ev.SessionStarted)
    meta = started.meta["resume"]
    assert meta["candidate_env"] == {"PJRT_DEVICE": "CPU"} and "sk-secret" not in str(meta)
    assert meta["agent"]["kind"] == "scripted" and meta["agent"]["path"] == str(script)
    back = engine_from_log([ev.decode(ev.encode(started))], MemorySink())
    c = back.config
    assert back.session_id == engine.session_id and back.workdir == engine.workdir
    assert (c.policy, c.reference_runs, c.timeout_s, c.stall_s) == ("runs-only", 3, 60, 9)
    assert back.criteria == engine.criteria and c.agent is not None
    assert c.agent.label == "scripted:a.jsonl" and c.agent.speed == 2  # type: ignore[attr-defined]
    assert Criteria.from_dict(engine.criteria.to_dict()) == engine.criteria
    assert Criteria.from_dict(Criteria().to_dict()) == Criteria()
    script.write_text('{"claim": "changed"}\n')  # the recording no longer matches the log
    try:
        engine_from_log([started], MemorySink())
    except RuntimeError as exc:
        assert "changed since the session started" in str(exc)
    else:
        raise AssertionError("a changed recording must be refused")


def test_scripted_agent_continues_inside_a_rejection_chain(tmp_path: Path) -> None:
    from portside.core.agent.scripted import ScriptedAgent

    script = tmp_path / "a.jsonl"
    alt = {"path": "t.py", "old": "b", "new": "c"}
    script.write_text("\n".join(json.dumps(x) for x in [
        {"say": "hi"},
        {"edit": {"path": "t.py", "old": "a", "new": "b"},
         "if_rejected": {"say": "ok, another way", "edit": alt}},
        {"claim": "done"},
    ]) + "\n")

    def call(n: int, line: int, name: str) -> ev.AgentToolCall:
        return ev.AgentToolCall(session_id="s", call_id=f"scripted-{n}-l{line}", name=name)

    def result(n: int, line: int, text: str, err: bool = False) -> ev.AgentToolResult:
        return ev.AgentToolResult(session_id="s", call_id=f"scripted-{n}-l{line}", content=text,
                                  is_error=err)

    log: list[ev.Event] = [
        ev.AgentText(session_id="s", text="hi"), call(1, 2, "propose_edit"),
        result(1, 2, "The reviewer rejected this edit: no", err=True),
        ev.AgentText(session_id="s", text="ok, another way"), call(2, 2, "propose_edit"),
        result(2, 2, "Edit x to t.py was approved and applied."), call(3, 3, "finish"),
        result(3, 3, "Claim recorded."),
    ]
    # (position, the step or if_rejected alternative it continues with, a say still owed)
    expect = {0: (0, None, None), 1: (1, "a", None), 2: (1, "a", None),
              3: (1, "b", "ok, another way"), 4: (1, "b", None), 5: (1, "b", None),
              6: (2, "finish", None), 7: (2, "finish", None), 8: (3, None, None)}
    for cut, (position, alt_from, say) in expect.items():
        agent = ScriptedAgent(script, speed=0)
        agent.restore(log[:cut])
        got_alt = agent._resume_alt
        alt_key = None if got_alt is None else (got_alt.args.get("old") or got_alt.tool)
        assert (agent.position, alt_key, agent._resume_say) == (position, alt_from, say), cut
    assert agent._calls == 3 and agent.last_stop == "claimed"


def test_claude_agent_conversation_is_rebuilt_from_the_log(tmp_path: Path) -> None:
    from portside.core.agent.claude import ClaudeAgent
    from portside.core.workspace.workspace import Workspace

    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "train.py").write_text("print(1)\n")

    class Host:
        session_id = "s"
        task = "Port it."
        workspace = Workspace.create(tmp_path / "p", tmp_path / "ws")

        def take_messages(self) -> list[str]:
            return []

    log: list[ev.Event] = [
        ev.AgentText(session_id="s", text="Let me "), ev.AgentText(session_id="s", text="look."),
        ev.AgentUsage(session_id="s", model="m", input_tokens=10, output_tokens=5),
        ev.AgentToolCall(session_id="s", call_id="t1", name="read_file", input={"path": "a"}),
        ev.AgentToolResult(session_id="s", call_id="t1", content="1\tx"),
        _intervention("message", "keep clipping"),
        ev.AgentText(session_id="s", text="Now the edit."),
        ev.AgentUsage(session_id="s", model="m"),
        ev.AgentToolCall(session_id="s", call_id="t2", name="propose_edit", input={"path": "a"}),
        _intervention("message", "hurry"),
        ev.AgentText(session_id="s", text="cut off mid-strea"),  # no usage: asked again
    ]
    agent = ClaudeAgent(model="claude-test")
    agent.restore(log, Host())  # type: ignore[arg-type]
    m = agent.messages
    assert agent.turns == 2 and [x["role"] for x in m] == ["user", "assistant", "user", "assistant"]
    assert "Port it." in m[0]["content"][0]["text"]
    assert m[1]["content"] == [{"type": "text", "text": "Let me look."},
                               {"type": "tool_use", "id": "t1", "name": "read_file",
                                "input": {"path": "a"}}]
    assert m[2]["content"][0]["tool_use_id"] == "t1"
    assert m[2]["content"][1]["text"] == "Message from the reviewer: keep clipping"
    assert m[3]["content"][1]["id"] == "t2"
    agent._prepare_user_turn(Host())  # type: ignore[arg-type]
    last = agent.messages[-1]["content"]
    assert last[0]["tool_use_id"] == "t2" and last[0]["is_error"]  # answered "interrupted"
    assert last[1]["text"] == "Message from the reviewer: hurry"


def test_a_live_session_cannot_be_resumed_twice(tmp_path: Path) -> None:
    from portside.core.session.config import SessionConfig, SessionLocked
    from portside.core.session.engine import SessionEngine

    config = SessionConfig(project=tmp_path, target="cpu", reference_command="true",
                           workdir=tmp_path / "w")
    first = SessionEngine(config, MemorySink())
    first.lock()
    second = SessionEngine(config, MemorySink(), session_id=first.session_id)
    try:
        second.lock()
    except SessionLocked as exc:
        assert "still running" in str(exc)
    else:
        raise AssertionError("two engines on one session")
    first._unlock()
    second.lock()  # the first one is gone (as after kill -9): allowed
    second._unlock()


def test_an_aborted_reference_never_vouches_for_a_candidate(tmp_path: Path) -> None:
    """Issue 13.2: killed during the reference phase twice, the first resume had marked the
    cut-off reference `aborted`; the second resume restored it as a reference, so a candidate
    was judged against a 1-step envelope and passed. Aborted references are run again."""
    from portside.core.session.config import SessionConfig
    from portside.core.session.engine import SessionEngine
    from portside.core.session.resume import engine_from_log

    config = SessionConfig(project=tmp_path, target="cpu", reference_command="true",
                           reference_runs=2, workdir=tmp_path / "w")
    sink = MemorySink()
    first = SessionEngine(config, sink)
    first._started()
    sid = first.session_id
    log: list[ev.Event] = list(sink.events)
    log += [
        ev.RunStarted(session_id=sid, run_id="ref1-a", role="reference", attempt=1,
                      command="true", target="cpu", ts=log[0].ts + 1),
        ev.RunRecord(session_id=sid, run_id="ref1-a",
                     records=[{"type": "step", "step": 0, "loss": 0.5, "rank": 0}]),
        # what the first resume wrote for the run the kill cut off
        ev.RunFinished(session_id=sid, run_id="ref1-a", exit_code=None, outcome="aborted",
                       reason="engine-killed", steps=1),
    ]
    for n, e in enumerate(log, 1):
        e.seq = n
    engine = engine_from_log(log, MemorySink())
    assert engine.resumed is not None
    engine._restore(engine.resumed)
    assert engine.verifier.references == []  # run again, never counted
    assert engine.ledger.valid_references() == []


@pytest.mark.slow  # whole sessions with real runs
async def test_a_candidate_without_a_valid_reference_cannot_pass(tmp_path: Path) -> None:
    """No reference that finished `passed` → `reference-failed` on the candidate, never a pass."""
    from portside.core.log.bus import EventBus
    from portside.core.log.criteria import Criteria
    from portside.core.session.verify import Verifier

    sink = MemorySink()
    verifier = Verifier(EventBus(sink), "s", Criteria(), "cpu", tmp_path / "probe", stall_s=30)
    await verifier.run_reference("exit 3", tmp_path)  # a reference that failed
    # A candidate that trains fine: with nothing to judge it against it must still not pass.
    report = await verifier.run_candidate(f"{shlex.quote(PY)} {TINY} --steps 20", tmp_path)
    kinds = {a.kind for a in report.alarms}
    assert report.records.n == 20
    assert "reference-failed" in kinds and report.outcome == "failed-silent"


def test_a_command_whose_inline_secret_the_log_does_not_keep_is_not_resumed(tmp_path: Path
                                                                            ) -> None:
    """`HF_TOKEN=hf_… python train.py` is stored as `HF_TOKEN=*** python train.py`: resuming
    would silently run another command, so it is refused with the reason."""
    from portside.core.session.config import SessionConfig
    from portside.core.session.engine import SessionEngine
    from portside.core.session.resume import ResumeError, engine_from_log

    secret = "hf_" + "a1B2c3D4e5F6g7H8i9J0kLmNoPqRsTuV"
    config = SessionConfig(project=tmp_path, target="cpu", workdir=tmp_path / "w",
                           reference_command=f"HF_TOKEN={secret} python train.py")
    sink = MemorySink()
    SessionEngine(config, sink)._started()
    started = sink.events[0]
    assert isinstance(started, ev.SessionStarted) and secret not in started.reference_command
    try:
        engine_from_log([started], MemorySink())
    except ResumeError as exc:
        assert "inline secret" in str(exc)
    else:
        raise AssertionError("resumed a command the log holds only masked")
    plain = SessionConfig(project=tmp_path, target="cpu", workdir=tmp_path / "w2",
                          reference_command="python train.py --glob 'a=***x'")
    sink = MemorySink()
    SessionEngine(plain, sink)._started()
    engine_from_log([sink.events[0]], MemorySink())  # no secret was masked: resumable


def _export(db: Path, sid: str, what: str, fmt: str) -> str:
    res = cli("export", sid, "--what", what, "--format", fmt, db=db, env=ENV, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


@pytest.mark.slow  # a real agent session signalled during its first reference, then resumed
def test_a_reference_portside_killed_is_superseded_by_its_rerun(tmp_path: Path) -> None:
    """Issue 37.4: SIGTERM during reference #1 raised `reference-failed` for the run portside
    itself cut off; `run --resume` ran reference #1 again (passed) and the candidate (passed),
    and the session still ended FAIL on the killed run's alarm, blaming the agent
    (`agent-claim-contradicted ... by reference-failed`). The rerun supersedes the killed run:
    its alarm is closed with a reason naming the rerun, in the log, the exports, the report
    and on replay; the session passes."""
    from portside.core.log.ledger import fold
    from portside.core.replay.state import fold as replay_fold

    project = tmp_path / "tiny-project"
    project.mkdir()
    shutil.copy(TINY, project / "train.py")
    script = tmp_path / "agent.jsonl"
    script.write_text("\n".join(json.dumps(x) for x in [
        {"say": "Porting train.py."},
        {"edit": {"path": "train.py", "old": "A tiny, parametrisable training script",
                  "new": "A tiny, parametrisable (ported) training script"}},
        {"run": "candidate"},
        {"claim": "Ported; the candidate passed with no alarm."},
    ]) + "\n")
    db, marker, pidfile = tmp_path / "s.db", tmp_path / "slept", tmp_path / "sleeper.pid"
    train = f"{shlex.quote(PY)} train.py --steps 30"
    # The first reference sleeps (portside is signalled meanwhile); every later run trains.
    reference = (f"if [ ! -e {marker} ]; then touch {marker}; echo $$ > {pidfile}; sleep 300; "
                 f"fi; {train}")
    env = {**ENV, "HOME": str(tmp_path)}
    proc = cli_popen(
        "run", str(project), "--target", "cpu", "--agent", f"scripted:{script}",
        "--reference", reference, "--reference-runs", "2", "--headless", "--policy", "auto",
        "--no-sandbox", "--json", "--stall", "120", db=db, env=env)
    try:
        deadline = time.monotonic() + 120
        while not (pidfile.exists() and pidfile.read_text().strip()):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "reference #1 never started"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    with Store(db) as store:
        (info,) = store.sessions()
        sid = info["session_id"]
        first = list(store.events(sid))
    (killed,) = [e for e in first if isinstance(e, ev.RunFinished)]
    assert (killed.outcome, killed.reason) == ("aborted", "engine-killed")
    (stale,) = [e for e in first if isinstance(e, ev.AlarmRaised)]
    assert stale.check == "reference-failed" and stale.run_id == killed.run_id

    res = cli("run", "--resume", sid, "--headless", "--json", db=db, env=env)
    assert res.returncode == 0, (res.stdout[-2000:], res.stderr[-3000:])
    assert json.loads(res.stdout)["verdict"] == "pass"

    with Store(db) as store:
        events = list(store.events(sid))
        runs = store.runs(sid)
        assert store.session(sid)["verdict"] == "pass"
    refs = [r for r in runs if r["role"] == "reference"]
    assert [(r["attempt"], r["outcome"]) for r in refs] == [
        (1, "aborted"), (1, "passed"), (2, "passed")]
    rerun = refs[1]["run_id"]
    # The log: the killed run's alarm closed once, with a reason naming its rerun; nothing
    # blames the agent.
    cleared = [e for e in events if isinstance(e, ev.AlarmCleared)]
    assert [e.alarm_id for e in cleared] == [stale.alarm_id]
    assert rerun in cleared[0].reason and "superseded" in cleared[0].reason
    checks = [e.check for e in events if isinstance(e, ev.AlarmRaised)]
    assert checks == ["reference-failed"]  # no agent-claim-contradicted
    # Replay and every reader of the fold: closed, with the reason; no open alarm.
    for state in (fold(events), replay_fold(events).ledger):
        entry = state.alarms[stale.alarm_id]
        assert entry.cleared and entry.cleared_reason == cleared[0].reason
        assert state.open_errors() == []
    # The exports and the report say why it closed.
    (row,) = json.loads(_export(db, sid, "alarms", "json"))
    assert row["cleared_at"] and row["cleared_reason"] == cleared[0].reason
    report = _export(db, sid, "report", "md")
    assert "cleared: superseded by" in report and rerun in report


@pytest.mark.slow  # a real verification signalled while its candidate is live, then resumed
def test_a_candidate_portside_killed_is_superseded_by_the_attempt_run_again(tmp_path: Path
                                                                            ) -> None:
    """Issue 37.4, the candidate's side: an alarm raised live on a candidate run portside was
    then killed during (no attempt: the ledger does not count it) is closed when that attempt
    is run again on resume, naming the rerun; the rerun is attempt #1 again."""
    db, marker, pidfile = tmp_path / "s.db", tmp_path / "slept", tmp_path / "sleeper.pid"
    train = f"{shlex.quote(PY)} {TINY} --steps 40"
    # The first candidate clips at 0.05 (clipping-changed, raised live), then idles until the
    # signal; the one run on resume is the reference's script.
    candidate = (f"if [ ! -e {marker} ]; then touch {marker}; {train} --max-norm 0.05; "
                 f"echo $$ > {pidfile}; sleep 300; fi; {train}")
    env = {**ENV, "HOME": str(tmp_path)}
    # [stop] would end the candidate at its clipping alarm: this test needs it alive after one
    criteria = tmp_path / "no-stop.toml"
    criteria.write_text("[stop]\nalarms = []\n")
    proc = cli_popen("verify", "--reference", train, "--candidate", candidate, "--target", "cpu",
                     "--reference-runs", "1", "--cwd", str(tmp_path), "--criteria",
                     str(criteria), db=db, env=env)
    try:
        deadline = time.monotonic() + 120
        raised: list[ev.Event] = []
        while not raised:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no live alarm on the candidate"
            if pidfile.exists() and pidfile.read_text().strip():
                with Store(db) as store:
                    (info,) = store.sessions()
                    raised = list(store.events(info["session_id"], kinds=["alarm.raised"]))
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    sid = raised[0].session_id
    with Store(db) as store:
        raised = list(store.events(sid, kinds=["alarm.raised"]))
    assert "clipping-changed" in {e.check for e in raised}  # type: ignore[attr-defined]

    res = cli("run", "--resume", sid, "--headless", "--json", db=db, env=env)
    assert res.returncode == 0, (res.stdout[-2000:], res.stderr[-3000:])
    assert json.loads(res.stdout)["verdict"] == "pass"
    with Store(db) as store:
        events = list(store.events(sid))
        cands = [r for r in store.runs(sid) if r["role"] == "candidate"]
        ledger = store.ledger(sid)
    assert [(r["attempt"], r["outcome"]) for r in cands] == [(1, "aborted"), (1, "passed")]
    cleared = {e.alarm_id: e.reason for e in events if isinstance(e, ev.AlarmCleared)}
    assert set(cleared) == {e.alarm_id for e in raised}  # type: ignore[attr-defined]
    assert all(f"superseded by {cands[1]['run_id']}" in why for why in cleared.values())
    assert ledger.attempts == 1 and ledger.open_errors() == []


def test_a_reference_run_again_takes_its_own_slot(tmp_path: Path) -> None:
    """Issue 37.4: references run two at a time, portside killed during #1 while #2 passed:
    the rerun was numbered #2 again (len + 1), the seed offset of the one that passed, and
    superseded nothing. It is #1 (seed offset 0) and closes #1's alarm."""
    import asyncio

    from portside.core.session.config import SessionConfig
    from portside.core.session.engine import SessionEngine
    from portside.core.session.resume import engine_from_log

    config = SessionConfig(project=tmp_path, target="cpu", reference_command="true",
                           reference_runs=2, workdir=tmp_path / "w")
    sink = MemorySink()
    first = SessionEngine(config, sink)
    first._started()
    sid = first.session_id
    step = {"type": "step", "step": 0, "loss": 0.5, "rank": 0}
    log: list[ev.Event] = [*sink.events]
    for n in (1, 2):
        log.append(ev.RunStarted(session_id=sid, run_id=f"ref{n}-a", role="reference",
                                 attempt=n, command="true", target="cpu", seed_offset=n - 1))
    log += [
        ev.RunRecord(session_id=sid, run_id="ref2-a", records=[step]),
        ev.RunFinished(session_id=sid, run_id="ref2-a", exit_code=0, outcome="passed", steps=1),
        ev.AlarmRaised(session_id=sid, alarm_id="al-ref1", check="reference-failed",
                       severity="error", title="reference run #1 did not train",
                       run_id="ref1-a"),
        ev.RunFinished(session_id=sid, run_id="ref1-a", exit_code=None, outcome="aborted",
                       reason="engine-killed"),
    ]
    for n, e in enumerate(log, 1):
        e.seq = n
    out = MemorySink()
    out.events.extend(log)  # the store's log goes on with the next seq
    engine = engine_from_log(log, out)
    assert engine.resumed is not None
    engine._restore(engine.resumed)
    assert [r.attempt for r in engine.verifier.references] == [2]
    report = asyncio.run(engine.verifier.run_reference("true", tmp_path))
    new = out.events[len(log):]
    (started,) = [e for e in new if isinstance(e, ev.RunStarted)]
    assert (report.attempt, started.attempt, started.seed_offset) == (1, 1, 0)
    (cleared,) = [e for e in new if isinstance(e, ev.AlarmCleared)]
    assert cleared.alarm_id == "al-ref1" and f"superseded by {report.run_id}" in cleared.reason
    assert engine.ledger.alarms["al-ref1"].cleared
