"""`portside stats`: the study's table from a fixture DB that mirrors its figures
(70 attempts, 53 failures, 26 of them silent, 10 migrations, 24 steering interventions)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from portside.cli.main import main
from portside.core.log import events as ev
from portside.store import Store
from portside.store.jsonl import import_events

T0 = 1_772_000_000.0
FAILURES = [6, 6, 6, 5, 5, 5, 5, 5, 5, 5]  # 53
SILENT = [3, 3, 3, 3, 3, 3, 2, 2, 2, 2]  # 26
STEERING = [3, 3, 3, 3, 2, 2, 2, 2, 2, 2]  # 24


def _migration(i: int) -> list[ev.Event]:
    sid = f"2026030{i}-study-{i:04d}" if i < 10 else f"202603{i}-study-{i:04d}"
    project = "/work/mnist" if i % 2 else "/work/resnet"
    out: list[ev.Event] = [ev.SessionStarted(session_id=sid, project=project, target="tpu:v5e")]
    outcomes = (["failed-silent"] * SILENT[i] + ["failed-error"] * (FAILURES[i] - SILENT[i])
                + ["passed"] * (7 - FAILURES[i]))
    for k, outcome in enumerate(outcomes, start=1):
        rid = f"{sid}-c{k}"
        out.append(ev.RunStarted(session_id=sid, run_id=rid, role="candidate", attempt=k,
                                 command="python train.py", target="tpu:v5e"))
        out.append(ev.RunFinished(session_id=sid, run_id=rid, exit_code=0, outcome=outcome,
                                  wall_s=600.0, device={"device_kind": "TPU",
                                                        "device_name": "TPU v5e",
                                                        "device_count": 1}))
    for k in range(STEERING[i] + 1):  # plus one approval that does not steer
        out.append(ev.Intervention(session_id=sid, intervention_id=f"{sid}-i{k}",
                                   action="reject" if k else "approve", steering=bool(k),
                                   # apart in time: busy time is the union of the windows
                                   attention_started_at=k * 60.0, decided_at=k * 60.0 + 30.0))
    out.append(ev.AgentUsage(session_id=sid, model="claude-sonnet-4-5", cost_usd=1.0))
    if i == 2:  # one crash, its cause on the alarm as check_end puts it there
        out.append(ev.AlarmRaised(session_id=sid, alarm_id=f"{sid}-crash", check="crashed",
                                  severity="error", title="RuntimeError: can't allocate memory",
                                  evidence={"cause": "out-of-memory",
                                            "cause_line": "DefaultCPUAllocator: can't allocate"}))
    if i == 3:
        out.append(ev.AlarmRaised(session_id=sid, alarm_id=f"{sid}-goal", check="goal-regression",
                                  severity="error", title="accuracy 84.89% < 86.53%"))
    out.append(ev.SessionEnded(session_id=sid, verdict="fail" if i == 9 else "pass"))
    for n, e in enumerate(out, start=1):
        e.seq, e.ts = n, T0 + i * 86400 + n
    return out


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("stats") / "study.db"
    store = Store(path)
    for i in range(10):
        import_events(store, _migration(i))
    store.close()
    return path


def _stats(db: Path, *args: str) -> str:
    res = CliRunner().invoke(main, ["stats", "--db", str(db), *args])
    assert res.exit_code == 0, res.output
    return res.stdout


def test_study_figures_md(db: Path) -> None:
    out = _stats(db)
    total = next(line for line in out.splitlines() if line.startswith("| **total"))
    assert "| 70 | 53 (76%) | 26 (49%) | 24 / 34 |" in total
    assert "76% of execution attempts failed; 49% of the failures raised no error" in out
    assert "2.4 steering interventions per migration" in out
    assert "| 8 of 10 |" in total  # goal met: not the failed one, not the goal regression


def test_study_figures_json_and_costs(db: Path) -> None:
    data = json.loads(_stats(db, "--format", "json"))
    t = data["total"]
    assert (t["sessions"], t["attempts"], t["failures"], t["silent"], t["steering"]) == (
        10, 70, 53, 26, 24)
    assert round(t["failure_share"] * 100) == 76 and round(t["silent_share"] * 100) == 49
    assert t["steering_per_migration"] == pytest.approx(2.4)
    assert t["human_minutes"] == pytest.approx(34 * 0.5)
    assert t["compute_usd"] == pytest.approx(70 * 600 / 3600 * 1.20)
    assert t["tokens_usd"] == pytest.approx(10.0)
    total_usd = t["compute_usd"] + 10.0 + 17 / 60 * 100.0
    assert t["cost_per_successful_run_usd"] == pytest.approx(total_usd / 17)
    assert [s["goal_met"] for s in data["sessions"]].count(False) == 2


def test_filters_and_csv(db: Path) -> None:
    rows = list(csv.DictReader(io.StringIO(_stats(db, "--format", "csv", "--project", "mnist"))))
    assert [r["session"] for r in rows][-1] == "total"
    assert len(rows) == 6
    assert sum(int(r["attempts"]) for r in rows[:-1]) == int(rows[-1]["attempts"]) == 35
    # Session i started at T0 (2026-02-25 06:13 UTC) + i days: i >= 4 is on or after March 1.
    data = json.loads(_stats(db, "--format", "json", "--since", "2026-03-01"))
    assert data["total"]["sessions"] == 6
    res = CliRunner().invoke(main, ["stats", "--db", str(db), "--since", "yesterday"])
    assert res.exit_code != 0 and "--since 'yesterday'" in res.output


def test_cost_per_successful_task_and_crash_causes(db: Path) -> None:
    from portside.store.exports import stats, stats_md

    with Store(db) as store:
        data = stats(store)
    t = data["total"]
    assert t["successful_tasks"] == 9  # every migration but the 10th ended pass
    assert t["cost_per_successful_task_usd"] == pytest.approx(t["total_usd"] / 9)
    assert t["causes"] == {"out-of-memory": 1}
    assert [r["causes"] for r in data["sessions"]].count({"out-of-memory": 1}) == 1
    assert "9 of 10 passed" in stats_md(data) and "crash causes: 1 out-of-memory" in stats_md(data)


def test_the_report_names_the_crash_cause(db: Path) -> None:
    from portside.store.exports import report_md

    with Store(db) as store:
        text = report_md(store, "20260302-study-0002")
    assert "  - cause: **out-of-memory** — `DefaultCPUAllocator: can't allocate`" in text


def _abandoned(i: int, how: str) -> list[ev.Event]:
    """A session with no execution attempt: closed before any run, or stopped at a reference."""
    sid = f"20260310-gone-{i:04d}"
    out: list[ev.Event] = [ev.SessionStarted(session_id=sid, project="/work/mnist",
                                             target="tpu:v5e")]
    if how == "reference":
        out += [ev.RunStarted(session_id=sid, run_id=f"{sid}-r1", role="reference", attempt=1,
                              command="python train.py", target="cpu"),
                ev.RunFinished(session_id=sid, run_id=f"{sid}-r1", exit_code=None,
                               outcome="aborted", wall_s=60.0,
                               device={"device_kind": "TPU", "device_name": "TPU v5e",
                                       "device_count": 1})]
    out.append(ev.SessionEnded(session_id=sid, verdict="fail", outcome="failed-error",
                               reason="agent did not start"))
    for n, e in enumerate(out, start=1):
        e.seq, e.ts = n, T0 + 20 * 86400 + i * 100 + n
    return out


def test_sessions_without_an_attempt_are_kept_apart(tmp_path: Path) -> None:
    # Issue 41.7: 7 of 21 sessions had 0 attempts (a closed tab, a quit attach, an agent that
    # never started) and counted as failed migrations.
    path = tmp_path / "s.db"
    with Store(path) as store:
        for i in range(10):
            import_events(store, _migration(i))
        for i, how in enumerate(("none", "none", "reference")):
            import_events(store, _abandoned(i, how))
    data = json.loads(_stats(path, "--format", "json"))
    t = data["total"]
    assert (t["sessions"], t["attempts"], t["failures"], t["successful_tasks"]) == (10, 70, 53, 9)
    assert t["steering_per_migration"] == pytest.approx(2.4)
    assert t["abandoned"] == 3 and len(data["abandoned"]) == 3
    assert t["abandoned_usd"] == pytest.approx(60 / 3600 * 1.20)  # the aborted reference
    out = _stats(path)
    assert "| 70 | 53 (76%) | 26 (49%) | 24 / 34 |" in next(
        line for line in out.splitlines() if line.startswith("| **total (10 migrations)"))
    assert "3 session(s) without an execution attempt kept apart" in out
    assert "20260310-gone" not in out.split("\n\n")[0]  # not rows of the migrations' table
