"""The `portside` command. Textual is imported only by the commands that open the UI."""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path
from typing import Any

import click

from portside.core import __version__

NOT_BUILT = 3  # exit status of a command whose feature has not landed yet


def _db_option(f: Any) -> Any:
    return click.option(
        "--db",
        "db",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="SQLite file (default: $PORTSIDE_DB, else the user data dir's portside.db).",
    )(f)


def _db_path(ctx: click.Context, db: Path | None) -> Path:
    from portside.store import resolve_db_path

    return resolve_db_path(db or (ctx.obj or {}).get("db"))


def _open_store(ctx: click.Context, db: Path | None) -> Any:
    from portside.store import Store, StoreError

    path = _db_path(ctx, db)
    try:
        return Store(path)
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None
    except Exception as exc:  # sqlite3.DatabaseError on a file that is not a database
        raise click.ClickException(f"{path}: cannot open as a portside database: {exc}") from None


def _not_built(what: str, issue: str) -> None:
    click.echo(f"portside {what}: not yet built (tracked in the {issue} issue).", err=True)
    sys.exit(NOT_BUILT)


def _when(ts: float | None) -> str:
    if not ts:
        return "-"
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


@click.group(invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@_db_option
@click.version_option(__version__, prog_name="portside")
@click.pass_context
def main(ctx: click.Context, db: Path | None) -> None:
    """portside: review a coding agent while it ports a PyTorch project from GPUs to TPUs."""
    ctx.ensure_object(dict)
    ctx.obj["db"] = db
    if ctx.invoked_subcommand is None:
        ctx.invoke(sessions_cmd)


@main.command("sessions")
@_db_option
@click.pass_context
def sessions_cmd(ctx: click.Context, db: Path | None = None) -> None:
    """List the sessions in the database."""
    from rich.console import Console
    from rich.table import Table

    store = _open_store(ctx, db)
    rows = store.sessions()
    # Piped output keeps whole ids (rich would wrap to 80 columns).
    console = Console(width=None if sys.stdout.isatty() else 200)
    if not rows:
        console.print(f"No sessions in {store.path} yet.")
        return
    table = Table(title=f"sessions in {store.path}")
    for col in (
        "session",
        "project",
        "target",
        "agent",
        "started (UTC)",
        "attempts",
        "failures",
        "silent",
        "interventions",
        "human min",
        "verdict",
    ):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r["session_id"],
            Path(r["project"] or "").name or "-",
            r["target"] or "-",
            r["agent"] or "-",
            _when(r["started_at"]),
            str(r["attempts"]),
            str(r["failures"]),
            str(r["silent_failures"]),
            str(r["interventions"]),
            f"{(r['human_s'] or 0) / 60:.1f}",
            r["verdict"] or "open",
        )
    console.print(table)


@main.command("show")
@click.argument("session")
@_db_option
@click.option("--limit", type=int, default=0, help="Show at most this many events (0 = all).")
@click.pass_context
def show_cmd(ctx: click.Context, session: str, db: Path | None, limit: int) -> None:
    """Print a session's summary and its events as text."""
    from rich.console import Console

    from portside.core.render import event_line
    from portside.store import StoreError

    store = _open_store(ctx, db)
    try:
        sid = store.resolve_session(session)
        info = store.session(sid)
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None
    console = Console(highlight=False)
    console.print(
        f"[b]{sid}[/b]  project {info['project']}  target {info['target']}  agent {info['agent']}"
        f"  verdict {info['verdict'] or 'open'}"
    )
    console.print(
        f"attempts {info['attempts']}  failures {info['failures']} "
        f"(silent {info['silent_failures']})  interventions {info['interventions']} "
        f"(steering {info['steering']})  alarms {info['alarms']}"
    )
    start = None
    for n, event in enumerate(store.events(sid)):
        if limit and n >= limit:
            console.print(f"… {store.event_count(sid) - limit} more")
            break
        start = start or event.ts
        console.print(event_line(event, start), markup=False)


@main.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@_db_option
@click.option("--as", "rename_to", default=None, help="Import under this session id instead.")
@click.pass_context
def import_cmd(ctx: click.Context, file: Path, db: Path | None, rename_to: str | None) -> None:
    """Import a JSONL recording (refused whole if malformed)."""
    from portside.store import StoreError
    from portside.store.jsonl import RecordingError, import_file

    store = _open_store(ctx, db)
    try:
        sid = import_file(store, file, rename_to)
    except (RecordingError, StoreError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"imported {sid} ({store.event_count(sid)} events) into {store.path}")


@main.command("export")
@click.argument("session")
@_db_option
@click.option(
    "--what",
    type=click.Choice(["events", "interventions", "alarms", "runs", "report"]),
    default="events",
)
@click.option("--format", "fmt", type=click.Choice(["jsonl", "json", "csv", "md"]), default=None)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None)
@click.pass_context
def export_cmd(
    ctx: click.Context,
    session: str,
    db: Path | None,
    what: str,
    fmt: str | None,
    output: Path | None,
) -> None:
    """Export a session: its events as a JSONL recording, or its interventions and more."""
    from portside.store import StoreError
    from portside.store.jsonl import export_session

    if what != "events" or (fmt or "jsonl") != "jsonl":
        _not_built(f"export --what {what} --format {fmt}", "replay/export")
    store = _open_store(ctx, db)
    try:
        sid = store.resolve_session(session)
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None
    if output is None:
        export_session(store, sid, sys.stdout.buffer)
    else:
        with open(output, "wb") as fh:
            n = export_session(store, sid, fh)
        click.echo(f"wrote {n} events of {sid} to {output}", err=True)


@main.command("demo", context_settings={"ignore_unknown_options": True})
@_db_option
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def demo_cmd(db: Path | None, args: tuple[str, ...]) -> None:
    """Run the embedded demo migration session."""
    _not_built("demo", "embedded demo")


@main.command("run", context_settings={"ignore_unknown_options": True})
@_db_option
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def run_cmd(db: Path | None, args: tuple[str, ...]) -> None:
    """Review a live migration session."""
    _not_built("run", "live review TUI / agent")


@main.command("verify", context_settings={"ignore_unknown_options": True})
@_db_option
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def verify_cmd(db: Path | None, args: tuple[str, ...]) -> None:
    """Verify a candidate run against reference runs, headless."""
    _not_built("verify", "verification engine")


@main.command("replay", context_settings={"ignore_unknown_options": True})
@_db_option
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def replay_cmd(db: Path | None, args: tuple[str, ...]) -> None:
    """Replay a session with its original timing."""
    _not_built("replay", "replay/export")


@main.command("stats", context_settings={"ignore_unknown_options": True})
@_db_option
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def stats_cmd(db: Path | None, args: tuple[str, ...]) -> None:
    """Effort and cost across sessions."""
    _not_built("stats", "replay/export")


if __name__ == "__main__":
    main()
