"""The study's fold: task states and the report's counts, from logs written by hand (what a
study's sessions hold), so each number is known before the fold sees it."""

from __future__ import annotations

from pathlib import Path

from portside.core.log import events as ev
from portside.core.study.fold import study_report, task_state
from portside.core.study.manifest import parse_manifest

MANIFEST = """\
[study]
name = "s"
[defaults]
path = "{p}"
reference = "python train.py"
candidate = "python train.py"
target = "cpu"
reference_runs = 1
[[project]]
name = "a"
[[project]]
name = "b"
[[project]]
name = "c"
"""


def _run(sid: str, run: str, role: str, outcome: str, reason: str = "exited") -> list[ev.Event]:
    return [ev.RunStarted(session_id=sid, run_id=run, role=role, attempt=1, command="x",
                          target="cpu"),  # type: ignore[arg-type]
            ev.RunFinished(session_id=sid, run_id=run, exit_code=0, outcome=outcome,
                           wall_s=1.0, reason=reason, steady_step_s=0.01)]


def _log(sid: str, *events: ev.Event | list[ev.Event]) -> list[ev.Event]:
    out: list[ev.Event] = [ev.SessionStarted(session_id=sid, project="/p", target="cpu")]
    for e in events:
        out += e if isinstance(e, list) else [e]
    for i, e in enumerate(out, 1):
        e.seq, e.ts = i, float(i)
    return out


def test_states_and_counts(tmp_path: Path) -> None:
    m = parse_manifest(MANIFEST.format(p=tmp_path), "m.toml")
    placed = ev.SessionState(session_id="A", state="study-placed", detail="reference phase on h")
    logs = {
        # a: references done, the candidate's first worker died mid-run (engine-killed, not an
        # attempt), retried, failed silently
        "A": _log("A", placed, _run("A", "r1", "reference", "passed"),
                  _run("A", "c1", "candidate", "aborted", "engine-killed"),
                  ev.SessionState(session_id="A", state="study-retry", detail="lost"),
                  _run("A", "c2", "candidate", "failed-silent"),
                  ev.SessionEnded(session_id="A", verdict="fail", outcome="failed-silent")),
        # b: its reference done, waiting for the candidate phase
        "B": _log("B", _run("B", "r1", "reference", "passed")),
    }
    sessions = {"a": "A", "b": "B"}
    a, b, c = (task_state(t, sessions.get(t.task_id, ""), logs.get(sessions.get(t.task_id, ""), []))
               for t in m.tasks)
    assert (a.state, a.retries, a.verdict) == ("done", 1, "fail")
    assert (b.state, b.phase, b.runs_done, b.runs_total) == ("waiting", "candidate", 1, 2)
    assert (c.state, c.phase) == ("pending", "reference")
    report = study_report(m, sessions, logs)
    rows = {r["task"]: r for r in report["tasks"]}
    assert (rows["a"]["attempts"], rows["a"]["failures"], rows["a"]["silent"]) == (1, 1, 1)
    assert rows["a"]["retries"] == 1 and rows["a"]["steady_step_ms"] == 10.0
    t = report["total"]
    assert (t["attempts"], t["failures"], t["silent"], t["passed"], t["done"]) == (1, 1, 1, 0, 1)
    assert t["summary"] == "1 of 1 attempts failed, 1 of them silently; 0 of 3 tasks passed"
    assert t["outcomes"] == {"failed-silent": 1, "pending": 1, "waiting": 1}


AGENT_MANIFEST = """\
[study]
name = "r"
[[project]]
name = "ask"
path = "{p}"
reference = "python train.py"
agent = "scripted:{a}"
policy = "ask"
target = "cpu"
"""


def test_waiting_for_a_reviewer(tmp_path: Path) -> None:
    """An agent task (policy = "ask") whose edit, and then whose claim, nobody decided yet;
    decided, it runs again. A verification card decided by policy never waits."""
    (tmp_path / "agent.jsonl").write_text("")
    m = parse_manifest(AGENT_MANIFEST.format(p=tmp_path, a=tmp_path / "agent.jsonl"), "m.toml")
    (task,) = m.tasks
    assert task.policy == "ask"
    placed = ev.SessionState(session_id="S", state="study-placed", detail="all phase on h")
    proposed = ev.EditProposed(session_id="S", edit_id="e-1", path="train.py", before="a",
                               after="b")
    decided = ev.EditDecided(session_id="S", edit_id="e-1", decision="approved")
    claimed = ev.AgentClaimed(session_id="S", summary="done")
    verdict = ev.Intervention(session_id="S", intervention_id="i-1", action="verdict",
                              steering=False, attention_started_at=1.0, decided_at=2.0,
                              verdict="pass")
    start = ev.SessionStarted(session_id="S", project="/p", target="cpu",
                              meta={"policy": "ask"})

    def state(*events: ev.Event) -> str:
        log = _log("S", placed, *events)
        log[0] = start
        return task_state(task, "S", log).state

    assert state(proposed) == "waiting for a reviewer"
    assert state(proposed, decided) == "running"
    assert state(proposed, decided, claimed) == "waiting for a reviewer"
    assert state(proposed, decided, claimed, verdict) == "running"
    # the same log under policy auto: its cards never wait for anyone
    auto = parse_manifest(AGENT_MANIFEST.format(p=tmp_path, a=tmp_path / "agent.jsonl")
                          .replace('policy = "ask"\n', ""), "m.toml").tasks[0]
    assert task_state(auto, "S", _log("S", placed, proposed)).state == "running"


def test_policy_goes_with_an_agent(tmp_path: Path) -> None:
    import pytest

    from portside.core.study.manifest import ManifestError

    bad = MANIFEST.format(p=tmp_path).replace('name = "b"\n', 'name = "b"\npolicy = "ask"\n')
    with pytest.raises(ManifestError, match=r"m.toml:\d+: project\[2\]\.policy: policy goes "
                                            r"with agent"):
        parse_manifest(bad, "m.toml")
    wrong = AGENT_MANIFEST.format(p=tmp_path, a=tmp_path / "agent.jsonl").replace(
        'policy = "ask"', 'policy = "runs-only"')
    (tmp_path / "agent.jsonl").write_text("")
    with pytest.raises(ManifestError, match=r"m.toml:8: project\[1\]\.policy: 'runs-only': "
                                            r"expected one of auto, ask"):
        parse_manifest(wrong, "m.toml")


def test_steady_step_is_a_median_and_a_busy_machine_is_said(tmp_path: Path) -> None:
    """Issue 41.6: the study's "steady ms/step (ref)" read 0.29 to 72 ms for the same tiny
    trainer on a busy machine. It is the median over runs (one slow run does not move it), and
    where the references' own steady steps lie more than 1.5× apart the table says "busy
    machine" with their range instead of a speed."""
    from portside.cli.study import report_md

    m = parse_manifest(MANIFEST.format(p=tmp_path), "m.toml")

    def runs(sid: str, ref_steps: list[float], cand_steps: list[float]) -> list[ev.Event]:
        out: list[ev.Event] = []
        for i, s in enumerate(ref_steps):
            r = _run(sid, f"r{i}", "reference", "passed")
            r[1].steady_step_s = s  # type: ignore[attr-defined]
            out += r
        for i, s in enumerate(cand_steps):
            c = _run(sid, f"c{i}", "candidate", "passed")
            c[1].steady_step_s = s  # type: ignore[attr-defined]
            out += c
        return out

    logs = {"A": _log("A", runs("A", [0.010, 0.011, 0.012], [0.020, 0.021, 0.500])),
            "B": _log("B", runs("B", [0.00029, 0.072], [0.010]))}
    report = study_report(m, {"a": "A", "b": "B"}, logs)
    rows = {r["task"]: r for r in report["tasks"]}
    assert rows["a"]["steady_step_ms"] == 21.0  # the median: the 500 ms run does not move it
    assert rows["a"]["reference_steady_step_ms"] == 11.0 and not rows["a"]["steady_busy"]
    assert rows["b"]["steady_busy"] and rows["b"]["reference_steady_range_ms"] == [0.29, 72.0]
    md = report_md(report, None)
    line_b = next(line for line in md.splitlines() if line.startswith("| b |"))
    assert "busy machine: refs 0.29–72" in line_b, line_b
    assert "median of a run's step times" in md
