"""Exports and the study's table, read from the store (no Textual; used by the CLI and tests).

Every number (costs, counts, human time, goal met) comes from the session's ledger
(``core/log/ledger.py``), folded from the log; rows come from the derived tables, written in the same
transaction as their events, or (interventions) from the log itself. Secrets never reach the store (the runner
scrubs them), so nothing here needs to filter them.

Formats: CSV through the stdlib ``csv`` module; JSON as an array of rows (the interventions'
shape is documented by ``store/schemas/interventions.schema.json``); JSONL one row a line;
Markdown tables.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import math
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from portside.core.log import costs
from portside.core.log import events as ev
from portside.core.log.ledger import attention_s
from portside.core.log.performance import performance
from portside.core.safety.terminal_text import clean_text, clean_text_stream, json_safe
from portside.core.workspace.risk import linked_edits_for

from .queries import Store

SCHEMA_DIR = Path(__file__).with_name("schemas")
INTERVENTION_COLUMNS = (
    "session",
    "seq",
    "kind",
    "steering",
    "answers",
    "attention_started_at",
    "decided_at",
    "attention_seconds",
    "reviewer",
    "note",
    "verdict",
)
ALARM_COLUMNS = (
    "session",
    "seq",
    "alarm_id",
    "check",
    "severity",
    "title",
    "run_id",
    "raised_at",
    "acknowledged_at",
    "acknowledged_by",
    "cleared_at",
    "evidence",
)
RUN_COLUMNS = (
    "session",
    "seq",
    "run_id",
    "role",
    "attempt",
    "target",
    "outcome",
    "exit_code",
    "reason",
    "started_at",
    "finished_at",
    "wall_s",
    "compile_s",
    "steady_step_s",
    "steps",
    "compute_usd",
    "error_type",
    "error_message",
)


def iso(ts: float | None) -> str | None:
    """ISO 8601 UTC with milliseconds and a Z, or None."""
    if ts is None or not math.isfinite(ts):
        return None
    return (
        dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )


# --- rows -----------------------------------------------------------------------------------


def intervention_rows(store: Store, session_ids: Sequence[str]) -> list[dict[str, Any]]:
    return list(iter_intervention_rows(store, session_ids))


def iter_intervention_rows(store: Store, session_ids: Sequence[str]) -> Iterator[dict[str, Any]]:
    """Every intervention, read from the log itself (the reviewer's verdict is a field of its
    intervention, which the derived table does not carry)."""
    for sid in session_ids:
        for e in store.events(sid, kinds=["intervention"]):
            if not isinstance(e, ev.Intervention):
                continue
            yield (
                {
                    "session": sid,
                    "seq": e.seq,
                    "kind": e.action,
                    "steering": bool(e.steering),
                    "answers": e.answers,
                    "attention_started_at": iso(e.attention_started_at),
                    "decided_at": iso(e.decided_at),
                    "attention_seconds": round(attention_s(e), 3),
                    "reviewer": e.reviewer or "",
                    "note": e.note or "",
                    "verdict": e.verdict or "",
                }
            )


def alarm_rows(store: Store, session_ids: Sequence[str]) -> list[dict[str, Any]]:
    return list(iter_alarm_rows(store, session_ids))


def iter_alarm_rows(store: Store, session_ids: Sequence[str]) -> Iterator[dict[str, Any]]:
    for sid in session_ids:
        for r in store.iter_table("alarms", sid, "seq"):
            yield (
                {
                    "session": sid,
                    "seq": r["seq"],
                    "alarm_id": r["alarm_id"],
                    "check": r["check"],
                    "severity": r["severity"],
                    "title": r["title"],
                    "run_id": r["run_id"] or "",
                    "raised_at": iso(r["raised_at"]),
                    "acknowledged_at": iso(r["acknowledged_at"]),
                    "acknowledged_by": r["acknowledged_by"] or "",
                    "cleared_at": iso(r["cleared_at"]),
                    "evidence": r["evidence"] or {},
                }
            )


def run_rows(store: Store, session_ids: Sequence[str]) -> list[dict[str, Any]]:
    return list(iter_run_rows(store, session_ids))


def iter_run_rows(store: Store, session_ids: Sequence[str]) -> Iterator[dict[str, Any]]:
    for sid in session_ids:
        ledger = store.ledger(sid)
        for r in store.iter_table("runs", sid, "seq"):
            entry = ledger.runs.get(r["run_id"])
            yield (
                {
                    "session": sid,
                    "seq": r["seq"],
                    "run_id": r["run_id"],
                    "role": r["role"],
                    "attempt": r["attempt"],
                    "target": r["target"],
                    "outcome": r["outcome"],
                    "exit_code": r["exit_code"],
                    "reason": r["reason"] or "",
                    "started_at": iso(r["started_at"]),
                    "finished_at": iso(r["finished_at"]),
                    "wall_s": r["wall_s"],
                    "compile_s": r["compile_s"],
                    "steady_step_s": r["steady_step_s"],
                    "steps": r["steps"],
                    "compute_usd": entry.compute_usd if entry is not None else None,
                    "error_type": r["error_type"] or "",
                    "error_message": r["error_message"] or "",
                }
            )


# --- formats --------------------------------------------------------------------------------


def to_csv(rows: Iterable[dict[str, Any]], columns: Sequence[str]) -> str:
    return "".join(iter_csv(rows, columns))


def iter_csv(rows: Iterable[dict[str, Any]], columns: Sequence[str]) -> Iterator[str]:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _cell(row.get(k)) for k in columns})
        yield buf.getvalue()
        buf.seek(0)
        buf.truncate()
    yield buf.getvalue()


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    return value


def to_json(rows: Iterable[dict[str, Any]]) -> str:
    return "".join(iter_json(rows))


def iter_json(rows: Iterable[dict[str, Any]]) -> Iterator[str]:
    """``json.dumps(list(rows), indent=2)`` a row at a time: each row dumped on its own, its
    lines indented one level (strings never hold a raw newline in JSON)."""
    first = True
    for row in rows:
        text = json.dumps(row, indent=2, sort_keys=False, ensure_ascii=False)
        yield json_safe(("[\n" if first else ",\n") + "  " + text.replace("\n", "\n  "))
        first = False
    yield "[]\n" if first else "\n]\n"


def to_jsonl(rows: Iterable[dict[str, Any]]) -> str:
    return "".join(iter_jsonl(rows))


def iter_jsonl(rows: Iterable[dict[str, Any]]) -> Iterator[str]:
    for r in rows:
        yield json_safe(json.dumps(r, ensure_ascii=False)) + "\n"


def _md_cell(value: Any) -> str:
    text = "" if value is None else str(_cell(value))
    return text.replace("|", "\\|").replace("\n", " ")


def iter_md(rows: Iterable[dict[str, Any]], columns: Sequence[str]) -> Iterator[str]:
    yield "| " + " | ".join(columns) + " |\n" + "|" + "---|" * len(columns) + "\n"
    for row in rows:
        yield "| " + " | ".join(_md_cell(row.get(c)) for c in columns) + " |\n"


def render(rows: Iterable[dict[str, Any]], columns: Sequence[str], fmt: str) -> str:
    return "".join(render_iter(rows, columns, fmt))


def render_iter(rows: Iterable[dict[str, Any]], columns: Sequence[str], fmt: str
                ) -> Iterator[str]:
    """The export as it is made, row by row (constant memory whatever the row count)."""
    # Exports go to terminals and pull requests: no escape sequence from a run or a recording
    # survives into CSV or Markdown (JSON escapes its controls, losslessly).
    if fmt == "csv":
        return clean_text_stream(iter_csv(rows, columns))
    if fmt == "json":
        return iter_json(rows)
    if fmt == "jsonl":
        return iter_jsonl(rows)
    if fmt == "md":
        return clean_text_stream(iter_md(rows, columns))
    raise ValueError(f"unknown format {fmt!r}")


# --- effort and cost ------------------------------------------------------------------------


def session_costs(store: Store, session_id: str) -> dict[str, Any]:
    """Compute, tokens and the reviewer's time, as the study counts them (the ledger's)."""
    return store.ledger(session_id).cost()


# --- the pull-request report ----------------------------------------------------------------


def _usd(value: float | None) -> str:
    return "n/a" if value is None else f"${value:,.2f}"


def _num(value: Any, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _evidence(evidence: dict[str, Any], limit: int = 240) -> str:
    text = json.dumps(evidence, sort_keys=True, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _output_cuts(store: Store, session_id: str) -> list[str]:
    """Runs whose output was not all stored (core/run/runner.py keeps a run's first 32 MiB and
    its last lines, and says so in the line that opens the tail)."""
    rows = store.conn.execute(
        "SELECT json_extract(body, '$.run_id'), json_extract(body, '$.lines[0]') FROM events"
        " WHERE session_id = ? AND kind = 'run.output'"
        " AND json_extract(body, '$.lines[0]') LIKE '[portside: % of output not stored%'",
        (session_id,)).fetchall()
    return ["", *(f"- Output of {run}: {_md_cell(str(note).strip('[]'))}" for run, note in rows)
            ] if rows else []


def report_md(store: Store, session_id: str) -> str:
    """A Markdown summary of one session, for a pull request."""
    s = store.session(session_id)
    ledger = store.ledger(session_id)
    runs = run_rows(store, [session_id])
    alarms = store.alarms(session_id)
    acts = intervention_rows(store, [session_id])
    cost = ledger.cost()
    met = ledger.goal_met()
    out = [f"# portside report · {session_id}", ""]
    duration = (s["ended_at"] - s["started_at"]) if s["ended_at"] and s["started_at"] else None
    out += [
        f"- **Project:** `{s['project']}`",
        f"- **Target:** {s['target']}",
        f"- **Agent:** {s['agent']}",
        f"- **Started:** {_when(s['started_at'])} · **ended:** {_when(s['ended_at'])}"
        + (f" · **duration:** {duration / 60:.1f} min" if duration is not None else ""),
        f"- **Verdict:** {s['verdict'] or 'open'}"
        + (f" ({s['outcome']})" if s["outcome"] else "")
        + f" · **goal met:** {'yes' if met else 'no' if met is False else 'open'}",
        *([f"- **Ended because:** {_md_cell(ledger.ended.reason)}"]
          if ledger.ended is not None and ledger.ended.reason else []),
        "",
        "## Runs",
        "",
        "Compile time is reported apart from the steady state (per-step time after warm-up).",
        "",
    ]
    if runs:
        out.append(
            "| run | role | attempt | target | outcome | exit | wall s | compile s "
            "| steady ms/step | steps | compute |"
        )
        out.append("|---|---|---|---|---|---|---|---|---|---|---|")
        for r in runs:
            steady = r["steady_step_s"] * 1000 if r["steady_step_s"] is not None else None
            out.append(
                f"| {r['run_id']} | {r['role']} | {r['attempt']} | {r['target']} | {r['outcome']} "
                f"| {_num(r['exit_code'], 'd')} | {_num(r['wall_s'], '.1f')} "
                f"| {_num(r['compile_s'], '.1f')} | {_num(steady, '.1f')} | {_num(r['steps'], 'd')} "
                f"| {_usd(r['compute_usd'])} |"
            )
    else:
        out.append("No runs.")
    out += _output_cuts(store, session_id)
    edits = list(store.events(session_id, kinds=["edit.proposed", "edit.applied",
                                                  "command.proposed", "edit.decided"]))
    proposed = [e for e in edits if ev.is_file_edit(e)]  # commands are not edits
    applied = {e.edit_id for e in edits if isinstance(e, ev.EditApplied)}
    out += _commands_section(edits)
    out += ["", "## Risk marks on edits", "",
            "What each proposed edit touches that can silently alter training (marked when it "
            "was proposed, before the reviewer's decision).", ""]
    marked = [e for e in proposed if e.risks]
    for e in marked:
        state = "applied" if e.edit_id in applied else "not applied"
        for m in e.risks:
            where = f":{m.line}" if m.line else ""
            out.append(f"- `{_md_cell(e.path)}{where}` ({e.edit_id}, {state}): "
                       f"{_md_cell(m.text)}")
    if not marked:
        out.append("No edit carried a risk mark.")
    out += ["", "## Alarms", ""]
    localized = {e.alarm_id: e for e in store.events(session_id, kinds=["alarm.localized"])
                 if isinstance(e, ev.AlarmLocalized)}
    if alarms:
        for a in alarms:
            state = "cleared" if a["cleared_at"] else "acknowledged" if a["acknowledged_at"] else "open"
            run = f" · run {a['run_id']}" if a["run_id"] else ""
            out.append(
                f"- **{a['severity']}** `{a['check']}`: {_md_cell(a['title'])} "
                f"(seq {a['seq']}{run}, {state})"
            )
            cause = _crash_cause(a) if a["check"] == "crashed" else None
            if cause is not None:
                out.append(f"  - cause: **{cause[0]}**"
                           + (f" — `{_md_cell(cause[1])}`" if cause[1] else ""))
            if a["evidence"]:
                out.append(f"  - evidence: `{_evidence(a['evidence'])}`")
            loc = localized.get(a["alarm_id"])
            if loc is not None:  # portside verify --localize
                out.append(f"  - where it diverged: {_md_cell(loc.summary or loc.error)}")
            for e, m in linked_edits_for(a["check"], a["evidence"], proposed, applied)[:1]:
                out.append(f"  - linked edit: `{_md_cell(e.path)}` ({e.edit_id}) carried "
                           f"\"{_md_cell(m.text)}\"")
    else:
        out.append("No alarms.")
    out += ["", "## Interventions", ""]
    if acts:
        out.append("| seq | kind | steering | answers | attention s | reviewer | note |")
        out.append("|---|---|---|---|---|---|---|")
        for i in acts:
            out.append(
                f"| {i['seq']} | {i['kind']} | {'yes' if i['steering'] else 'no'} "
                f"| {_num(i['answers'], 'd')} | {i['attention_seconds']:.1f} "
                f"| {_md_cell(i['reviewer'])} | {_md_cell(i['note'])} |"
            )
    else:
        out.append("No interventions.")
    notes = f" · review notes (replay): {ledger.review_notes}" if ledger.review_notes else ""
    out += [
        "",
        "## Effort and cost",
        "",
        f"- Candidate attempts: {ledger.attempts} · failures: {ledger.failures} "
        f"(silent: {ledger.silent_failures})",
        f"- Interventions: {ledger.interventions} (steering: {ledger.steering}) · human time: "
        f"{cost['human_minutes']:.1f} min{notes}",
        f"- Compute: {_usd(cost['compute_usd'])} · tokens: {_usd(cost['tokens_usd'])} · "
        f"human: {_usd(cost['human_usd'])} (at ${cost['human_usd_per_hour']:.0f}/h) · "
        f"total: {_usd(cost['total_usd'])}",
        f"- Cost per successful run: {_usd(cost['cost_per_successful_run_usd'])} "
        f"({cost['successful_runs']} successful candidate run"
        f"{'s' if cost['successful_runs'] != 1 else ''}; failed attempts included)",
    ]
    perf = performance(ledger)
    if perf is not None:
        out.append(f"- Performance: {_md_cell(perf['line'])}")
    if cost["unpriced_runs"]:
        out.append(f"- Runs on devices without a price (counted $0): {', '.join(cost['unpriced_runs'])}")
    if cost["unpriced_models"]:
        out.append("- Agent models without a price (tokens counted $0): "
                   + ", ".join(cost["unpriced_models"]))
    out += ["", "## Verdict", ""]
    if s["verdict"]:
        reason = store.conn.execute("SELECT reason FROM sessions WHERE session_id = ?",
                                    (session_id,)).fetchone()[0]
        out.append(f"**{s['verdict'].upper()}**" + (f": {_md_cell(reason)}" if reason else ""))
    else:
        out.append("The session has not ended.")
    return clean_text("\n".join(out) + "\n")


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
    made during replay. A migration is a session.
    """
    rows = []
    for s in sorted(store.sessions(), key=lambda r: (r["started_at"] or 0, r["session_id"])):
        if project and project not in (s["project"], Path(s["project"] or "").name):
            continue
        if since is not None and (s["started_at"] or 0) < since:
            continue
        led = store.ledger(s["session_id"])
        c = led.cost()
        rows.append(
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
    }
    return {"sessions": rows, "total": total}


def _crash_cause(alarm: dict[str, Any]) -> tuple[str, str]:
    """(cause, the line that shows it) of a crash alarm row; a crash recorded before causes
    existed is "unknown"."""
    evidence = alarm.get("evidence") or {}
    if isinstance(evidence, str):  # stored as JSON text
        try:
            evidence = json.loads(evidence)
        except ValueError:
            evidence = {}
    if not isinstance(evidence, dict):
        evidence = {}
    cause, line = evidence.get("cause"), evidence.get("cause_line")
    return (cause if isinstance(cause, str) and cause else "unknown",
            line if isinstance(line, str) else "")


def _crash_causes(alarms: list[dict[str, Any]]) -> dict[str, int]:
    """Why the session's runs crashed: the crash alarms' evidence.cause, counted."""
    out: dict[str, int] = {}
    for a in alarms:
        if a.get("check") == "crashed":
            key = _crash_cause(a)[0]
            out[key] = out.get(key, 0) + 1
    return out


def _sum_counts(counts: Iterable[dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in counts:
        for k, n in c.items():
            out[k] = out.get(k, 0) + n
    return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))


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
            f"| {_usd(r['compute_usd'])} | {_usd(r['tokens_usd'])} "
            f"| {_usd(r['cost_per_successful_run_usd'])} | {met} |"
        )
    per = t["steering_per_migration"]
    migrations = "1 migration" if t["sessions"] == 1 else f"{t['sessions']} migrations"
    lines.append(
        f"| **total ({migrations})** | {t['attempts']} "
        f"| {t['failures']} ({_pct(t['failure_share'])}) | {t['silent']} ({_pct(t['silent_share'])}) "
        f"| {t['steering']} / {t['interventions']} | {t['human_minutes']:.1f} "
        f"| {_usd(t['compute_usd'])} | {_usd(t['tokens_usd'])} "
        f"| {_usd(t['cost_per_successful_run_usd'])} | {t['goal_met']} of {t['goal_decided']} |"
    )
    summary = (
        f"\n{_pct(t['failure_share'])} of execution attempts failed; "
        f"{_pct(t['silent_share'])} of the failures raised no error (failed-silent); "
        f"{'-' if per is None else f'{per:.1f}'} steering interventions per migration "
        f"(interventions: steering / all); {_usd(t['cost_per_successful_task_usd'])} per "
        f"successful task ({t['successful_tasks']} of {t['sessions']} passed, every session's "
        f"cost counted)"
        + (f"; crash causes: {', '.join(f'{n} {k}' for k, n in t['causes'].items())}"
           if t["causes"] else "")
        + ".\n"
    )
    return clean_text("\n".join(lines) + "\n" + summary)


def stats_csv(data: dict[str, Any]) -> str:
    total = dict(data["total"], session="total")
    return clean_text(to_csv([*data["sessions"], total],
                             [*STATS_COLUMNS, "successful_runs", "total_usd"]))


def stats_json(data: dict[str, Any]) -> str:
    return json_safe(json.dumps(data, indent=2, ensure_ascii=False)) + "\n"


def _commands_section(events: list[ev.Event]) -> list[str]:
    """The commands the agent proposed and what the reviewer (or the policy) decided."""
    decided = {e.edit_id: e for e in events if isinstance(e, ev.EditDecided)}
    commands = [c for e in events if (c := ev.as_command(e)) is not None]
    out = ["", "## Commands", "",
           "Shell commands the agent asked to run, each decided before it ran.", ""]
    if not commands:
        return out + ["No commands."]
    out.append("| seq | command | cwd | decision | by | reason |")
    out.append("|---|---|---|---|---|---|")
    for c in commands:
        d = decided.get(c.command_id)
        run = d.after if d is not None and d.decision == "edited" and d.after else c.command
        out.append(f"| {c.seq} | `{_md_cell(run)}` | {_md_cell(c.cwd)} "
                   f"| {d.decision if d else 'undecided'} | {d.by if d else ''} "
                   f"| {_md_cell(d.reason) if d else ''} |")
    return out
