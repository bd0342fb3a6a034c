"""The pull-request report of one session (``export --what report``), in Markdown."""

from __future__ import annotations

import datetime as dt
from typing import Any

from portside.core.checks.describe import describe, one_line
from portside.core.checks.evidence import likely_causes, read
from portside.core.log import events as ev
from portside.core.log.ledger import Ledger
from portside.core.log.performance import larger_inputs, performance
from portside.core.log.render import reused_text
from portside.core.safety.terminal_text import clean_text
from portside.core.workspace.risk import linked_edits_for
from portside.store.exports.formats import md_cell, usd
from portside.store.exports.rows import crash_cause, intervention_rows, run_rows
from portside.store.queries import Store

# --- the pull-request report ----------------------------------------------------------------



def _num(value: Any, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


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
    return ["", *(f"- Output of {run}: {md_cell(str(note).strip('[]'))}" for run, note in rows)
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
        *([f"- **Ended because:** {md_cell(ledger.ended.reason)}"]
          if ledger.ended is not None and ledger.ended.reason else []),
        "",
    ]
    out += _scan_section(store, session_id)
    out += [
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
                f"| {usd(r['compute_usd'])} |"
            )
        reused = [(r.run_id, r.reused_from) for r in ledger.runs.values() if r.reused_from]
        if reused:
            out.append("")
        for run_id, origin in reused:  # not run again: said, and why its compute is $0 here
            out.append(f"- {run_id}: {md_cell(reused_text(origin))} (run "
                       f"{md_cell(str(origin.get('run_id', '?')))}; the same key, so not run "
                       "again: its compute counts in that session)")
        for run in ledger.runs.values():
            if run.stopped and run.finished is not None:  # why it has fewer steps than its refs
                out.append(f"- {run.run_id}: {md_cell(run.finished.error_message)} (ended by "
                           f"[stop]; {ledger.saved_s(run):.1f} run-seconds not spent)")
    else:
        out.append("No runs.")
    out += _output_cuts(store, session_id)
    out += _larger_section(ledger)
    out += _change_section(store, session_id)
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
            out.append(f"- `{md_cell(e.path)}{where}` ({e.edit_id}, {state}): "
                       f"{md_cell(m.text)}")
    if not marked:
        out.append("No edit carried a risk mark.")
    out += ["", "## Alarms", ""]
    localized = {e.alarm_id: e for e in store.events(session_id, kinds=["alarm.localized"])
                 if isinstance(e, ev.AlarmLocalized)}
    if alarms:
        for a in alarms:
            state = "cleared" if a["cleared_at"] else "acknowledged" if a["acknowledged_at"] else "open"
            why = ledger.alarms[a["alarm_id"]].cleared_reason \
                if a["cleared_at"] and a["alarm_id"] in ledger.alarms else ""
            state += f": {md_cell(why)}" if why else ""
            run = f" · run {a['run_id']}" if a["run_id"] else ""
            out.append(
                f"- **{a['severity']}** `{a['check']}`: {md_cell(a['title'])} "
                f"(seq {a['seq']}{run}, {state})"
            )
            cause = crash_cause(a) if a["check"] == "crashed" else None
            if cause is not None:
                out.append(f"  - cause: **{cause[0]}**"
                           + (f" — `{md_cell(cause[1])}`" if cause[1] else ""))
            if a["evidence"]:
                out.append(f"  - evidence: {md_cell(one_line(describe(a['check'], a['evidence'])))}")
            loc = localized.get(a["alarm_id"])
            if loc is not None:  # portside verify --localize
                out.append(f"  - where it diverged: {md_cell(loc.summary or loc.error)}")
            causes = likely_causes(read(a["check"], a["evidence"]))
            for e, m in linked_edits_for(a["check"], causes, proposed, applied)[:1]:
                out.append(f"  - linked edit: `{md_cell(e.path)}` ({e.edit_id}) carried "
                           f"\"{md_cell(m.text)}\"")
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
                f"| {md_cell(i['reviewer'])} | {md_cell(i['note'])} |"
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
        f"- Compute: {usd(cost['compute_usd'])} · tokens: {usd(cost['tokens_usd'])} · "
        f"human: {usd(cost['human_usd'])} (at ${cost['human_usd_per_hour']:.0f}/h) · "
        f"total: {usd(cost['total_usd'])}",
        f"- Cost per successful run: {usd(cost['cost_per_successful_run_usd'])} "
        f"({cost['successful_runs']} successful candidate run"
        f"{'s' if cost['successful_runs'] != 1 else ''}; failed attempts included)",
    ]
    perf = performance(ledger)
    if perf is not None:
        out.append(f"- Performance: {md_cell(perf['line'])}")
    if cost.get("stopped_runs"):  # [stop]: what the attempts ended early did not run
        out.append(f"- Stopped at a decisive alarm: {cost['stopped_runs']} candidate run(s); "
                   f"compute saved {cost['compute_saved_s']:.1f} s "
                   f"({usd(cost['compute_saved_usd'])})")
    if cost["unpriced_runs"]:
        out.append(f"- Runs on devices without a price (counted $0): {', '.join(cost['unpriced_runs'])}")
    if cost["unpriced_models"]:
        out.append("- Agent models without a price (tokens counted $0): "
                   + ", ".join(cost["unpriced_models"]))
    out += ["", "## Verdict", ""]
    if s["verdict"]:
        reason = store.conn.execute("SELECT reason FROM sessions WHERE session_id = ?",
                                    (session_id,)).fetchone()[0]
        out.append(f"**{s['verdict'].upper()}**" + (f": {md_cell(reason)}" if reason else ""))
    else:
        out.append("The session has not ended.")
    return clean_text("\n".join(out) + "\n")




def _scan_section(store: Store, session_id: str) -> list[str]:
    """The project's portability scan the session logged at its start (``portside scan``)."""
    scans = [e for e in store.events(session_id, kinds=["project.scanned"])
             if isinstance(e, ev.ProjectScanned)]
    if not scans:
        return []
    e = scans[-1]
    out = ["## Portability scan", "",
           f"`portside scan` at the start, before any run: {e.files} file(s), {e.parsed} "
           f"parsed, {e.seconds:.2f} s.", ""]
    if not e.total:
        return [*out, "Nothing to port beyond the device itself.", ""]
    out.append("- " + " · ".join(f"`{k}` {n}" for k, n in e.counts.items()))
    out += ["", "| place | kind | what | what to do |", "|---|---|---|---|"]
    out += [f"| `{md_cell(f.path)}:{f.line}` | {f.kind} | `{md_cell(f.what)}` "
            f"| {md_cell(f.action)} |" for f in e.findings]
    if e.total > len(e.findings):
        out += ["", f"{e.total - len(e.findings)} more not logged: `portside scan` lists them."]
    return [*out, ""]


def _larger_section(ledger: Ledger) -> list[str]:
    """[larger]: each passed attempt's few steps at the bigger size, beside the attempt."""
    rows = larger_inputs(ledger)
    if not rows:
        return []
    out = ["", "## Larger inputs", "",
           "A few steps of the candidate at the criteria's larger size ([larger]), judged for "
           "peak memory, compilations after warm-up and step time against the attempt it "
           "followed (its alarms are under Alarms, by run).", ""]
    out += [f"- {r['run']} (after attempt {r['attempt']}, {r['candidate_run'] or '-'}): "
            f"{md_cell(r['line'])}" for r in rows]
    return out


def _change_section(store: Store, session_id: str) -> list[str]:
    """`verify --session` of an attached session: the whole change it judged, file by file."""
    started = next(iter(store.events(session_id, kinds=["session.started"])), None)
    meta = started.meta if isinstance(started, ev.SessionStarted) else {}
    changed = meta.get("changed_files")
    if not isinstance(changed, list) or not changed:
        return []
    out = ["", "## The change verified", "",
           f"Session {md_cell(str(meta.get('verifies', '')))}'s whole change, from the tree "
           f"before it ({md_cell(str(meta.get('tree_before', '')))}) to "
           f"`{md_cell(str(meta.get('tree', '')))}`.", "",
           "| file | change | lines + | lines − |", "|---|---|---|---|"]
    for c in changed:
        text = "added" in c
        out.append(f"| `{md_cell(str(c.get('path')))}` | {md_cell(str(c.get('status')))} "
                   f"| {c['added'] if text else 'binary'} | {c['removed'] if text else ''} |")
    return out


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
        out.append(f"| {c.seq} | `{md_cell(run)}` | {md_cell(c.cwd)} "
                   f"| {d.decision if d else 'undecided'} | {d.by if d else ''} "
                   f"| {md_cell(d.reason) if d else ''} |")
    return out
