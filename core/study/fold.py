"""A study's facts, folded from its sessions' logs: each task's state (for `study status` and
the sessions screen) and the paper's tables (for `study report`). The per-session numbers come
from the session's Ledger (core/log/ledger.py), the one place that decides what counts."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any

from portside.core.log import costs
from portside.core.log import events as ev
from portside.core.log.ledger import Ledger, fold
from portside.core.log.performance import too_far_apart
from portside.core.session.awaiting import awaiting
from portside.core.session.resume import final_end

from .manifest import Manifest, Task

REVIEWER = "waiting for a reviewer"  # an agent's card (policy = "ask") nobody has decided yet
STATES = ("pending", "running", "waiting", REVIEWER, "done", "failed")


@dataclass
class TaskState:
    task_id: str
    project: str
    session_id: str
    state: str  # pending | running | waiting (for its next phase) | REVIEWER | done | failed
    phase: str  # the phase running or next: reference | candidate | all | ""
    where: str  # the last placement the worker reported
    runs_done: int
    runs_total: int
    retries: int  # phases run again after their worker was lost
    verdict: str
    outcome: str

    @property
    def progress(self) -> float:
        if self.state in ("done", "failed"):
            return 1.0
        return self.runs_done / self.runs_total if self.runs_total else 0.0


def task_state(task: Task, session_id: str, log: list[ev.Event]) -> TaskState:
    total = task.reference_runs + 1  # an agent may make more attempts: shown as they come
    if not log:
        return TaskState(task.task_id, task.project, "", "pending", task.phases[0], "", 0,
                         total, 0, "", "")
    led = fold(log)
    where = next((e.detail for e in reversed(log) if isinstance(e, ev.SessionState)
                  and e.state == "study-placed"), "")
    retries = sum(1 for e in log if isinstance(e, ev.SessionState) and e.state == "study-retry")
    done = sum(1 for r in led.runs.values() if r.finished is not None and not r.engine_killed)
    live = [r for r in led.runs.values() if r.finished is None]
    end = final_end(log)
    if end is not None:
        state = "done" if end.verdict == "pass" or led.attempts else "failed"
        return TaskState(task.task_id, task.project, session_id, state, "", where, done,
                         max(total, done), retries, end.verdict, end.outcome)
    refs = [r for r in led.runs.values() if r.role == "reference" and r.finished is not None
            and not r.engine_killed and r.outcome != "aborted"]
    if task.agent:
        phase = "all"
    else:
        phase = "candidate" if len(refs) >= task.reference_runs else "reference"
    placed_for = where.split(" phase", 1)[0] if where else ""
    running = bool(live) or placed_for == phase
    state = "running" if running else "waiting"
    if running and task.policy == "ask" and awaiting(log):
        state = REVIEWER
    return TaskState(task.task_id, task.project, session_id, state,
                     phase, where, done, max(total, done + len(live)), retries, "", "")


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def task_row(task: Task, session_id: str, log: list[ev.Event]) -> dict[str, Any]:
    """One project's line of the paper's table (a task; repetitions are lines of their own)."""
    st = task_state(task, session_id, log)
    led = fold(log) if log else Ledger()
    cands = [r for r in led.candidates() if r.finished is not None]
    refs = [r for r in led.valid_references() if r.finished is not None]
    steady = [r.finished.steady_step_s for r in cands if r.finished and r.finished.steady_step_s]
    ref_steady = [r.finished.steady_step_s for r in refs if r.finished and r.finished.steady_step_s]
    # Steady steps as the performance sentence takes them (core/log/performance.py): medians,
    # and "busy" when the references' own lie too far apart: the machine, not the code,
    # decided them (the same tiny trainer read 0.29 to 72 ms here under load).
    busy = bool(ref_steady) and too_far_apart(min(ref_steady), max(ref_steady))
    c = led.cost()
    return {
        "task": task.task_id,
        "project": task.project,
        "session": session_id,
        "state": st.state,
        "verdict": st.verdict,
        "outcome": st.outcome,
        "attempts": led.attempts,
        "failures": led.failures,
        "silent": led.silent_failures,
        # [stop]: attempts ended at their first decisive alarm, and the run time they did not use
        "stopped": c["stopped_runs"],
        "saved_s": round(c["compute_saved_s"], 3),
        "saved_usd": round(c["compute_saved_usd"], 6),
        "interventions": led.interventions,
        "steering": led.steering,
        "human_minutes": round(led.human_minutes, 3),
        "compile_s": _round(_mean([r.finished.compile_s for r in cands if r.finished])),
        "steady_step_ms": _round(_ms(_median(steady))),
        "reference_steady_step_ms": _round(_ms(_median(ref_steady))),
        "steady_busy": busy,
        "reference_steady_range_ms": ([_round(_ms(min(ref_steady))), _round(_ms(max(ref_steady)))]
                                      if ref_steady else None),
        "compute_usd": round(c["compute_usd"], 6),
        "total_usd": round(c["total_usd"], 6),
        "successful_runs": c["successful_runs"],
        "cost_per_successful_run_usd": _round(c["cost_per_successful_run_usd"], 6),
        "retries": st.retries,
        "where": st.where,
    }


def _stopped_clause(rows: list[dict[str, Any]]) -> str:
    stopped = sum(r["stopped"] for r in rows)
    if not stopped:
        return ""
    return (f"; {stopped} attempt(s) stopped at a decisive alarm, "
            f"{sum(r['saved_s'] for r in rows):.1f} run-seconds saved")


def _ms(s: float | None) -> float | None:
    return None if s is None else s * 1000.0


def _round(x: float | None, digits: int = 3) -> float | None:
    return None if x is None else round(x, digits)


def study_report(manifest: Manifest, sessions: dict[str, str],
                 logs: dict[str, list[ev.Event]]) -> dict[str, Any]:
    """``sessions``: task id -> session id; ``logs``: session id -> its events."""
    rows = [task_row(t, sessions.get(t.task_id, ""), logs.get(sessions.get(t.task_id, ""), []))
            for t in manifest.tasks]
    attempts = sum(r["attempts"] for r in rows)
    failures = sum(r["failures"] for r in rows)
    silent = sum(r["silent"] for r in rows)
    total_usd = sum(r["total_usd"] for r in rows)
    passed = sum(1 for r in rows if r["verdict"] == "pass")
    outcomes: dict[str, int] = {}
    for r in rows:
        outcomes[r["outcome"] or r["state"]] = outcomes.get(r["outcome"] or r["state"], 0) + 1
    n = len(rows)
    total = {
        "tasks": n,
        "projects": len({t.project for t in manifest.tasks}),
        "done": sum(1 for r in rows if r["state"] in ("done", "failed")),
        "passed": passed,
        "outcomes": dict(sorted(outcomes.items())),
        "attempts": attempts,
        "failures": failures,
        "failure_share": failures / attempts if attempts else None,
        "silent": silent,
        "silent_share": silent / failures if failures else None,
        "interventions": sum(r["interventions"] for r in rows),
        "interventions_per_task": sum(r["interventions"] for r in rows) / n if n else None,
        "human_minutes": round(sum(r["human_minutes"] for r in rows), 3),
        "compute_usd": round(sum(r["compute_usd"] for r in rows), 6),
        "stopped": sum(r["stopped"] for r in rows),
        "saved_s": round(sum(r["saved_s"] for r in rows), 3),
        "saved_usd": round(sum(r["saved_usd"] for r in rows), 6),
        "total_usd": round(total_usd, 6),
        "cost_per_successful_task_usd": _round(costs.cost_per_successful_run(total_usd, passed),
                                               6),
        "retries": sum(r["retries"] for r in rows),
        "summary": (f"{failures} of {attempts} attempts failed, {silent} of them silently; "
                    f"{passed} of {n} tasks passed" + _stopped_clause(rows)),
    }
    return {"study": manifest.name, "manifest": manifest.path, "tasks": rows, "total": total}


def states(manifest: Manifest, sessions: dict[str, str],
           logs: dict[str, list[ev.Event]]) -> list[TaskState]:
    return [task_state(t, sessions.get(t.task_id, ""), logs.get(sessions.get(t.task_id, ""), []))
            for t in manifest.tasks]


def state_dict(s: TaskState) -> dict[str, Any]:
    return {**asdict(s), "progress": round(s.progress, 3)}
