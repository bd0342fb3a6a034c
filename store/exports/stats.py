"""The study's table across sessions (``portside stats``) and a session's effort and cost.

Every number (costs, counts, human time, goal met) comes from the session's ledger
(``core/log/ledger.py``), folded from the log."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from portside.core.log import costs
from portside.core.safety.terminal_text import clean_text, json_safe
from portside.store.exports.formats import to_csv, usd
from portside.store.exports.rows import crash_cause, iso
from portside.store.queries import Store

# --- effort and cost ------------------------------------------------------------------------


def session_costs(store: Store, session_id: str) -> dict[str, Any]:
    """Compute, tokens and the reviewer's time, as the study counts them (the ledger's)."""
    return store.ledger(session_id).cost()




# --- the study's table ----------------------------------------------------------------------

STATS_COLUMNS = (
    "session",
    "project",
    "target",
    "started",
    "attempts",
    "failures",
    "failure_share",
    "silent",
    "silent_share",
    "interventions",
    "steering",
    "human_minutes",
    "compute_usd",
    "tokens_usd",
    "cost_per_successful_run_usd",
    "goal_met",
)


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def stats(store: Store, project: str | None = None, since: float | None = None) -> dict[str, Any]:
    """Per session and in total: the figures the study counted by hand.

    ``failure_share`` is failures / attempts; ``silent_share`` is silent failures / failures
    (the study's "half of those failures raised no error"). Interventions exclude review notes
    made during replay. A migration is a session with at least one execution attempt (a
    candidate run): the study counts attempts. A session with none (a closed browser tab, a
    quit `attach`, an agent that never started, one still at its references) is kept apart in
    ``abandoned``, its cost in ``total.abandoned_usd``: counted as a failed migration it
    inflated the failures and thinned every per-migration figure.
    """
    rows: list[dict[str, Any]] = []
    abandoned: list[dict[str, Any]] = []
    for s in sorted(store.sessions(), key=lambda r: (r["started_at"] or 0, r["session_id"])):
        if project and project not in (s["project"], Path(s["project"] or "").name):
            continue
        if since is not None and (s["started_at"] or 0) < since:
            continue
        led = store.ledger(s["session_id"])
        c = led.cost()
        (rows if led.attempts else abandoned).append(
            {
                "session": s["session_id"],
                "project": s["project"],
                "target": s["target"],
                "started": iso(s["started_at"]),
                "attempts": led.attempts,
                "failures": led.failures,
                "failure_share": _share(led.failures, led.attempts),
                "silent": led.silent_failures,
                "silent_share": _share(led.silent_failures, led.failures),
                "interventions": led.interventions,
                "steering": led.steering,
                "human_minutes": c["human_minutes"],
                "compute_usd": c["compute_usd"],
                "tokens_usd": c["tokens_usd"],
                "total_usd": c["total_usd"],
                "successful_runs": c["successful_runs"],
                "cost_per_successful_run_usd": c["cost_per_successful_run_usd"],
                "goal_met": led.goal_met(),
                "verdict": s["verdict"],
                "causes": _crash_causes(store.alarms(s["session_id"])),
            }
        )
    n = len(rows)
    attempts = sum(r["attempts"] for r in rows)
    failures = sum(r["failures"] for r in rows)
    silent = sum(r["silent"] for r in rows)
    total_usd = sum(r["total_usd"] for r in rows)
    successes = sum(r["successful_runs"] for r in rows)
    steering = sum(r["steering"] for r in rows)
    interventions = sum(r["interventions"] for r in rows)
    total = {
        "sessions": n,
        "attempts": attempts,
        "failures": failures,
        "failure_share": _share(failures, attempts),
        "silent": silent,
        "silent_share": _share(silent, failures),
        "interventions": interventions,
        "steering": steering,
        "steering_per_migration": steering / n if n else None,
        "interventions_per_migration": interventions / n if n else None,
        "human_minutes": sum(r["human_minutes"] for r in rows),
        "compute_usd": sum(r["compute_usd"] for r in rows),
        "tokens_usd": sum(r["tokens_usd"] for r in rows),
        "total_usd": total_usd,
        "successful_runs": successes,
        "cost_per_successful_run_usd": costs.cost_per_successful_run(total_usd, successes),
        # a task is a migration (a session): the study's "cost per successfully completed
        # task", every session's cost (failed ones included) over those that passed
        "successful_tasks": (tasks := sum(1 for r in rows if r["verdict"] == "pass")),
        "cost_per_successful_task_usd": costs.cost_per_successful_run(total_usd, tasks),
        "goal_met": sum(1 for r in rows if r["goal_met"]),
        "goal_decided": sum(1 for r in rows if r["goal_met"] is not None),
        "causes": _sum_counts(r["causes"] for r in rows),
        "abandoned": len(abandoned),
        "abandoned_usd": sum(r["total_usd"] for r in abandoned),
    }
    return {"sessions": rows, "abandoned": abandoned, "total": total}



def _crash_causes(alarms: list[dict[str, Any]]) -> dict[str, int]:
    """Why the session's runs crashed: the crash alarms' evidence.cause, counted."""
    out: dict[str, int] = {}
    for a in alarms:
        if a.get("check") == "crashed":
            key = crash_cause(a)[0]
            out[key] = out.get(key, 0) + 1
    return out


def _sum_counts(counts: Iterable[dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in counts:
        for k, n in c.items():
            out[k] = out.get(k, 0) + n
    return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))


def _some(names: Iterable[str], at_most: int = 5) -> str:
    names = list(names)
    more = f" and {len(names) - at_most} more" if len(names) > at_most else ""
    return ", ".join(names[:at_most]) + more


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.0f}%"


def stats_md(data: dict[str, Any]) -> str:
    t = data["total"]
    cols = ("session", "attempts", "failures", "silent", "interventions", "human min",
            "compute", "tokens", "$/successful run", "goal met")
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in data["sessions"]:
        met = "yes" if r["goal_met"] else "no" if r["goal_met"] is False else "open"
        lines.append(
            f"| {r['session']} | {r['attempts']} | {r['failures']} ({_pct(r['failure_share'])}) "
            f"| {r['silent']} ({_pct(r['silent_share'])}) "
            f"| {r['steering']} / {r['interventions']} | {r['human_minutes']:.1f} "
            f"| {usd(r['compute_usd'])} | {usd(r['tokens_usd'])} "
            f"| {usd(r['cost_per_successful_run_usd'])} | {met} |"
        )
    per = t["steering_per_migration"]
    migrations = "1 migration" if t["sessions"] == 1 else f"{t['sessions']} migrations"
    lines.append(
        f"| **total ({migrations})** | {t['attempts']} "
        f"| {t['failures']} ({_pct(t['failure_share'])}) | {t['silent']} ({_pct(t['silent_share'])}) "
        f"| {t['steering']} / {t['interventions']} | {t['human_minutes']:.1f} "
        f"| {usd(t['compute_usd'])} | {usd(t['tokens_usd'])} "
        f"| {usd(t['cost_per_successful_run_usd'])} | {t['goal_met']} of {t['goal_decided']} |"
    )
    summary = (
        f"\n{_pct(t['failure_share'])} of execution attempts failed; "
        f"{_pct(t['silent_share'])} of the failures raised no error (failed-silent); "
        f"{'-' if per is None else f'{per:.1f}'} steering interventions per migration "
        f"(interventions: steering / all); {usd(t['cost_per_successful_task_usd'])} per "
        f"successful task ({t['successful_tasks']} of {t['sessions']} passed, every session's "
        f"cost counted)"
        + (f"; crash causes: {', '.join(f'{n} {k}' for k, n in t['causes'].items())}"
           if t["causes"] else "")
        + ".\n"
    )
    if t["abandoned"]:
        summary += (f"{t['abandoned']} session(s) without an execution attempt kept apart "
                    f"(abandoned or not started: {_some(r['session'] for r in data['abandoned'])}"
                    f"; {usd(t['abandoned_usd'])} spent on them, not in the figures above).\n")
    return clean_text("\n".join(lines) + "\n" + summary)


def stats_csv(data: dict[str, Any]) -> str:
    total = dict(data["total"], session="total")
    return clean_text(to_csv([*data["sessions"], total],
                             [*STATS_COLUMNS, "successful_runs", "total_usd"]))


def stats_json(data: dict[str, Any]) -> str:
    return json_safe(json.dumps(data, indent=2, ensure_ascii=False)) + "\n"
