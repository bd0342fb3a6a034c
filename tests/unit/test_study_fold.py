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
