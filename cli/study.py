"""`portside study run|status|report MANIFEST`: many projects, one task each, on this machine
or a Ray cluster; one database on this machine holds every session of the study."""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path
from typing import Any

import click

from portside.core.log.performance import SPREAD_LIMIT

from .exit_codes import UsageFailure
from .options import db_option, open_store
from .stored_references import fresh_option

MANIFEST = click.Path(dir_okay=False, exists=True, path_type=Path)


def _manifest(path: Path) -> Any:
    from portside.core.study.manifest import ManifestError, load_manifest

    try:
        return load_manifest(path)
    except ManifestError as exc:
        from portside.core.safety.terminal_text import clean_line

        raise UsageFailure(clean_line(str(exc), 600)) from None


def _logs(store: Any, manifest: Any) -> tuple[dict[str, str], dict[str, list[Any]]]:
    from portside.store.study_log import study_sessions

    sessions = study_sessions(store, manifest.name)
    return sessions, {sid: list(store.events(sid)) for sid in sessions.values()}


@click.group("study")
def study_group() -> None:
    """A study: many projects' verifications (or agent sessions) from one manifest."""


@study_group.command("run")
@click.argument("manifest", type=MANIFEST)
@click.option("--launcher", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="local: worker processes here; ray: Ray tasks placed by their resources.")
@click.option("--engine", "old_engine", type=click.Choice(["local", "ray"]), default=None,
              hidden=True)  # the option's name before 2026-12-06, still taken
@click.option("--address", default=None, metavar="ADDR",
              help="With --launcher ray: the cluster (default $RAY_ADDRESS, else 'auto').")
@click.option("--parallel", type=click.IntRange(1, 1024), default=None,
              help="Phases at once (local default: cores - 1; ray: as the cluster places them).")
@click.option("--retries", type=click.IntRange(0, 20), default=2, show_default=True,
              help="Times a phase whose worker died is run again (from the session's log).")
@fresh_option
@db_option
@click.pass_context
def run_cmd(ctx: click.Context, manifest: Path, launcher: str, old_engine: str | None,
            address: str | None, parallel: int | None, retries: int, db: Path | None,
            fresh_references: bool = False) -> None:
    """Run every task of MANIFEST not done yet (exit 0: every task ended; 1: some could not)."""
    from portside.core.safety.terminal_text import clean_line
    from portside.core.study.driver import StudyRun, make_launcher
    from portside.store.reference_runs import StoredReferences
    from portside.store.study_log import StoreStudyLog

    m = _manifest(manifest)
    launcher = old_engine or launcher
    if address and launcher != "ray":
        raise click.UsageError("--address goes with --launcher ray")
    try:
        eng = make_launcher(launcher, parallel=parallel, address=address)
    except (ValueError, ConnectionError) as exc:
        raise UsageFailure(f"portside study run: {exc}") from None
    from .study_review import work_root

    store = open_store(ctx, db)

    def say(task_id: str, what: str) -> None:
        click.echo(clean_line(f"study {m.name} · {task_id}: {what}", 300), err=True)

    click.echo(f"study {m.name}: {len(m.tasks)} tasks, launcher {launcher}, database {store.path}",
               err=True)
    try:
        try:
            study = StudyRun(m, StoreStudyLog(store), eng, work_root(store),
                             max_tries=retries + 1, on_change=say,
                             references=StoredReferences(store.path),
                             fresh_references=fresh_references)
        except ValueError as exc:
            raise UsageFailure(f"portside study run: {exc}") from None
        results = study.run()
    finally:
        eng.close()
        store.close()
    failed = [r for r in results if r.error]
    ran = sum(1 for r in results if r.ran)
    click.echo(f"study {m.name}: {ran} task(s) run, {len(results) - ran} done earlier, "
               f"{len(failed)} could not finish; `portside study report {manifest}`", err=True)
    sys.exit(1 if failed else 0)


@study_group.command("review")
@click.argument("session")
@db_option
@click.pass_context
def review_cmd(ctx: click.Context, session: str, db: Path | None) -> None:
    """Open a study's running SESSION (id or prefix) live and decide its cards (a approve,
    r reject with a reason, e edit, v verdict; m message, space pause) while the rest of the
    study goes on."""
    from .options import resolve_session
    from .study_review import review_relay, review_session

    store = open_store(ctx, db)
    try:
        sid = resolve_session(store, session, "portside study review: ")
        relay = review_relay(store, sid)
        if relay is None:
            raise UsageFailure(f"portside study review: session {sid} is not a running session "
                               f"of a `study run` that waits for a reviewer (policy = \"ask\"); "
                               f"`portside replay {sid}` shows it")
        review_session(store, sid, relay)
    finally:
        store.close()


@study_group.command("status")
@click.argument("manifest", type=MANIFEST)
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
@db_option
@click.pass_context
def status_cmd(ctx: click.Context, manifest: Path, as_json: bool, db: Path | None) -> None:
    """Which tasks run where, done, failed, waiting; a progress bar each."""
    from portside.core.study.fold import state_dict, states

    m = _manifest(manifest)
    store = open_store(ctx, db)
    try:
        sessions, logs = _logs(store, m)
    finally:
        store.close()
    rows = states(m, sessions, logs)
    if as_json:
        click.echo(json.dumps({"study": m.name, "tasks": [state_dict(s) for s in rows]},
                              indent=2))
        return
    from rich.console import Console
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    from rich.text import Text

    from portside.core.safety.terminal_text import markup_free

    done = sum(1 for s in rows if s.state in ("done", "failed"))
    table = Table(title=Text(f"study {m.name}: {done} of {len(rows)} tasks done"))
    for col in ("task", "state", "phase", "where", "progress", "runs", "retries", "verdict"):
        table.add_column(col)
    for s in rows:
        table.add_row(Text(markup_free(s.task_id)), Text(s.state), Text(s.phase or "-"),
                      Text(markup_free(s.where) or "-"),
                      ProgressBar(total=1.0, completed=s.progress, width=20),
                      Text(f"{s.runs_done}/{s.runs_total}"), Text(str(s.retries)),
                      Text(markup_free(f"{s.verdict} {s.outcome}".strip()) or "-"))
    Console(width=None if sys.stdout.isatty() else 160).print(table)


@study_group.command("report")
@click.argument("manifest", type=MANIFEST)
@click.option("--format", "fmt", type=click.Choice(["md", "csv", "json"]), default="md",
              show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write here (md: the figure beside it, as FILE.svg).")
@db_option
@click.pass_context
def report_cmd(ctx: click.Context, manifest: Path, fmt: str, output: Path | None,
               db: Path | None) -> None:
    """The paper's tables for the study: per project and in total; a figure with md."""
    from portside.core.study import figure
    from portside.core.study.fold import study_report

    m = _manifest(manifest)
    store = open_store(ctx, db)
    try:
        sessions, logs = _logs(store, m)
    finally:
        store.close()
    report = study_report(m, sessions, logs)
    if fmt == "json":
        text = json.dumps(report, indent=2) + "\n"
    elif fmt == "csv":
        text = report_csv(report)
    else:
        svg = figure.svg(report)
        if output is not None:
            fig = output.with_suffix(".svg")
            fig.write_text(svg, encoding="utf-8")
            image = fig.name
        else:
            image = "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode()
        text = report_md(report, image)
    from portside.core.safety.terminal_text import clean_text

    text = clean_text(text)
    if output is not None:
        output.write_text(text, encoding="utf-8")
        click.echo(f"wrote {output}" + (f" and {output.with_suffix('.svg')}" if fmt == "md"
                                        else ""), err=True)
        return
    if fmt == "md" and sys.stdout.isatty():
        from rich.console import Console

        text = report_md(report, None)
        sys.stdout.write(text)
        Console().print(terminal_figure(report))
        return
    sys.stdout.write(text)


COLUMNS = ("task", "project", "outcome", "attempts", "failures", "silent", "stopped",
           "saved_s", "interventions", "human_minutes", "compile_s", "steady_step_ms", "reference_steady_step_ms",
           "total_usd", "cost_per_successful_run_usd", "retries", "where", "session")


def report_csv(report: dict[str, Any]) -> str:
    from portside.store.exports import to_csv

    t = report["total"]
    total = {"task": "total", "attempts": t["attempts"], "failures": t["failures"],
             "silent": t["silent"], "stopped": t["stopped"], "saved_s": t["saved_s"],
             "interventions": t["interventions"],
             "human_minutes": t["human_minutes"], "total_usd": t["total_usd"],
             "cost_per_successful_run_usd": t["cost_per_successful_task_usd"],
             "retries": t["retries"], "outcome": f"{t['passed']} of {t['tasks']} passed"}
    return str(to_csv([*report["tasks"], total], COLUMNS))


def _cell(v: Any) -> str:
    if v is None or v == "":
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v).replace("|", "\\|")


def report_md(report: dict[str, Any], image: str | None) -> str:
    t = report["total"]
    cols = ("project", "outcome", "attempts", "failures", "silent", "stopped (s saved)",
            "interventions", "human min",
            "compile s", "steady ms/step (ref)", "$ total", "$/successful run", "retries")
    lines = [f"# Study {report['study']}", "",
             f"**{t['summary']}.** Outcomes: "
             + ", ".join(f"{k} {v}" for k, v in t["outcomes"].items()) + ".", "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in report["tasks"]:
        steady = f"{_cell(r['steady_step_ms'])} ({_cell(r['reference_steady_step_ms'])})"
        if r.get("steady_busy"):  # the references' own steps too far apart: say it, not a speed
            lo, hi = r["reference_steady_range_ms"]
            steady = f"busy machine: refs {_cell(lo)}–{_cell(hi)}"
        lines.append("| " + " | ".join([
            _cell(r["task"]), _cell(r["outcome"] or r["state"]), _cell(r["attempts"]),
            _cell(r["failures"]), _cell(r["silent"]),
            f"{r['stopped']} ({r['saved_s']:.1f})", _cell(r["interventions"]),
            f"{r['human_minutes']:.1f}", _cell(r["compile_s"]), steady,
            f"{r['total_usd']:.4f}", _cell(r["cost_per_successful_run_usd"]),
            _cell(r["retries"])]) + " |")
    share = t["failure_share"]
    lines.append("| " + " | ".join([
        f"**total ({t['tasks']} tasks)**", f"{t['passed']} passed", str(t["attempts"]),
        f"{t['failures']} ({'-' if share is None else f'{share:.0%}'})", str(t["silent"]),
        f"{t['stopped']} ({t['saved_s']:.1f})", str(t["interventions"]), f"{t['human_minutes']:.1f}", "-", "-",
        f"{t['total_usd']:.4f}", _cell(t["cost_per_successful_task_usd"]) + " per task",
        str(t["retries"])]) + " |")
    lines += ["", "steady ms/step: the median of a run's step times after warm-up (compiled steps "
              "left out), the median over its runs; \"busy machine\" where the references' own "
              f"lie more than {SPREAD_LIMIT:g}× apart (the machine, not the code, decided them)."]
    if image is not None:
        lines += ["", f"![outcome per task and cost per task]({image})"]
    return "\n".join(lines) + "\n"


def terminal_figure(report: dict[str, Any]) -> Any:
    """The same figure as rich Text: a block per task coloured by outcome, a cost bar."""
    from rich.text import Text

    from portside.core.safety.terminal_text import markup_free
    from portside.core.study import figure

    rows = report["tasks"]
    top = max((r["total_usd"] for r in rows), default=0.0) or 1.0
    width = max((len(r["project"]) for r in rows), default=4) + 2
    text = Text()
    projects: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        projects.setdefault(r["project"], []).append(r)
    for name, tasks in projects.items():
        text.append(markup_free(name).ljust(width))
        for r in tasks:
            text.append("■ ", style=figure.TERMINAL.get(figure.outcome_of(r), "white"))
        usd = sum(r["total_usd"] for r in tasks)
        text.append(" " + "█" * max(1, round(20 * usd / top)), style="grey50")
        ok = sum(r["successful_runs"] for r in tasks)
        text.append(f" ${usd:.4f}" + (f" (${usd / ok:.4f}/success)" if ok else " (no success)"))
        text.append("\n")
    for outcome in ("passed", "failed-silent", "failed-error", "pending"):
        text.append("■ ", style=figure.TERMINAL[outcome])
        text.append(outcome + "  ")
    return text
