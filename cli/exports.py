"""The bodies of `portside replay`, `export` and `stats` (kept out of cli.py). No Textual here:
headless replay, export and stats never import it; only the replay screen does."""

from __future__ import annotations

import datetime as dt
import importlib.util
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import click


def _fail(message: str) -> None:
    """A usage error: what was asked cannot be done as asked (exit 2)."""
    from .exit_codes import UsageFailure

    raise UsageFailure(message)


def _not_written(output: Path, exc: OSError) -> None:
    """The output could not be written (exit 1): the request was fine, the write was not."""
    from .options import shown

    raise click.ClickException(f"{shown(output)}: cannot write: {exc.strerror or exc}")


def _write(text: str | Iterable[str], output: Path | None, what: str | Callable[[], str]
           ) -> None:
    """Write the export (a text, or its chunks as they are made: constant memory)."""
    chunks = [text] if isinstance(text, str) else text
    if output is None:
        for chunk in chunks:
            sys.stdout.write(chunk)
        sys.stdout.flush()
        return
    try:
        with open(output, "w", encoding="utf-8") as fh:
            for chunk in chunks:
                fh.write(chunk)
    except OSError as exc:
        _not_written(output, exc)
    click.echo(f"wrote {what if isinstance(what, str) else what()} to {output}", err=True)


# --- replay ---------------------------------------------------------------------------------


def replay(open_store: Callable[[], Any], target: str, speed: float, from_: str | None,
           headless: bool, idle_limit: float) -> None:
    from portside.core.log.render import event_line
    from portside.core.replay.index import ReplayError, SequenceSource
    from portside.core.replay.player import Replayer, check_speed, parse_from

    if speed < 0:
        _fail(f"--speed {speed}: must be >= 0 (0 plays as fast as possible)")
    store = None
    source: Any
    path = Path(target)
    if target.endswith(".jsonl") or path.is_file():
        # A recording is replayed as it is, validated whole, never imported.
        from portside.store.jsonl import RecordingError, read_recording

        try:
            events = read_recording(path)
        except RecordingError as exc:
            from portside.core.safety.terminal_text import clean_line

            _fail(clean_line(str(exc)))
        session_id = events[0].session_id
        source = SequenceSource(events)
        subject: Any = events
    else:
        from portside.store.replay_source import StoreSource

        from .options import resolve_session

        store = open_store()
        session_id = resolve_session(store, target)
        source = StoreSource(store, session_id)
        subject = store
    try:
        spec = parse_from(from_) if from_ else None
        check_speed(speed)  # here, not in the thread: a usage error before any screen
    except ReplayError as exc:
        _fail(str(exc))

    def build() -> Any:
        replayer = Replayer(source, speed=speed, idle_limit=idle_limit)
        if spec is not None:
            replayer.seek(replayer.resolve_from(spec) - 1)  # the named event plays first
        return replayer

    if not headless:
        if importlib.util.find_spec("portside.tui.replay_app") is not None:
            # Begun before the screen's imports: the index, the snapshots and the point are
            # built while Textual loads (the screen's mount waits for the rest).
            from portside.core.replay.opening import PendingOpening

            cache = None
            if store is not None:  # the store keeps the first frame (a recording: none)
                from portside.store.replay_frames import FrameCache, point_key

                cache = FrameCache(store, session_id, point_key(spec, idle_limit))
            opening = PendingOpening(source, build, cache)
            from portside.tui.replay_app import run_replay  # type: ignore[import-not-found]

            try:
                run_replay(subject, session_id, opening)
            except ReplayError as exc:  # a --from the session does not have
                _fail(str(exc))
            click.echo(after_replay_hint(session_id), err=True)
            return
        click.echo("portside replay: the replay screen is not built yet; replaying headless.",
                   err=True)
    try:
        replayer = build()
    except ReplayError as exc:
        _fail(str(exc))
    start = float(replayer.index.ts[0]) if len(replayer.index) else None
    out = sys.stdout

    def emit(event: Any) -> None:
        out.write(event_line(event, start) + "\n")
        if replayer.speed != float("inf"):
            out.flush()  # paced output shows as it plays, also through a pipe

    try:
        replayer.play_all(emit)
        out.flush()
    except BrokenPipeError:
        sys.stderr.close()  # `| head`: stop quietly
    except KeyboardInterrupt:
        sys.exit(130)


# --- export ---------------------------------------------------------------------------------


def _not_the_database(output: Path, db: Path) -> None:
    """Refuse an output that is the database or one of SQLite's files beside it: opening it
    for writing truncates it (the session log gone) before a single event is read."""
    theirs = [db] + [db.with_name(db.name + s) for s in ("-wal", "-shm", "-journal")]
    mine = output.resolve()
    for path in theirs:
        same = mine == path.resolve()
        if not same and path.exists() and output.exists():
            same = os.path.samefile(output, path)
        if same:
            _fail(f"{output}: that is the database {'' if path == db else 'file '}{path}; "
                  "give the export another file")


def export(store: Any, session: str | None, what: str, fmt: str | None, output: Path | None,
           all_sessions: bool) -> None:
    from portside.store import exports as ex
    from portside.store.jsonl import export_session

    from .options import resolve_session

    if output is not None:
        _not_the_database(output, store.path)
    fmt = fmt or {"events": "jsonl", "report": "md"}.get(what, "csv")
    if all_sessions and session:
        _fail("give a SESSION or --all, not both")
    if not all_sessions and not session:
        _fail("missing SESSION (an id, a unique prefix or 'last'), or --all")
    if what == "events" and fmt != "jsonl":
        _fail("events export as a JSONL recording only (--format jsonl)")
    if what == "report" and fmt != "md":
        _fail("the report is Markdown only (--format md)")
    if all_sessions and what in ("events", "report"):
        _fail(f"--all exports interventions, alarms or runs; export {what} one session at a time")
    sids = (
        [r["session_id"] for r in sorted(store.sessions(), key=lambda r: r["started_at"] or 0)]
        if all_sessions
        else [resolve_session(store, session or "")]
    )
    if what == "events":
        if output is None:  # C1 and bidi controls are \u escapes in every export
            export_session(store, sids[0], sys.stdout.buffer)
        else:
            try:
                with open(output, "wb") as fh:
                    n = export_session(store, sids[0], fh)
            except OSError as exc:
                _not_written(output, exc)
            click.echo(f"wrote {n} events of {sids[0]} to {output}", err=True)
        return
    if what == "report":
        _write(ex.report_md(store, sids[0]), output, f"the report of {sids[0]}")
        return
    rows, columns = {
        "interventions": (ex.iter_intervention_rows, ex.INTERVENTION_COLUMNS),
        "alarms": (ex.iter_alarm_rows, ex.ALARM_COLUMNS),
        "runs": (ex.iter_run_rows, ex.RUN_COLUMNS),
    }[what]
    count = 0

    def counted() -> Iterator[dict[str, Any]]:
        nonlocal count
        for row in rows(store, sids):
            count += 1
            yield row

    _write(ex.render_iter(counted(), columns, fmt), output, lambda: f"{count} {what}")


# --- stats ----------------------------------------------------------------------------------


def parse_since(text: str) -> float:
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        _fail(f"--since {text!r}: expected a date like 2026-03-01 or an ISO 8601 time")
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()


def stats(store: Any, project: str | None, since: str | None, fmt: str) -> None:
    from portside.store import exports as ex

    data = ex.stats(store, project=project, since=parse_since(since) if since else None)
    if not data["sessions"] and not data["abandoned"]:
        click.echo("no sessions match", err=True)
    render = {"md": ex.stats_md, "csv": ex.stats_csv, "json": ex.stats_json}[fmt]
    sys.stdout.write(render(data))


def after_replay_hint(session_id: str) -> str:
    """What to run after a replay; each `command` is one the CLI takes as written (a test
    runs them: the report's was `export ID report`, a usage error)."""
    return (f"portside: replayed {session_id} · `portside show {session_id}` prints it · "
            f"`portside export {session_id} --what report` writes its report")
