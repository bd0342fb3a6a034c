"""One way to drive a session engine, headless or on the screen, for run, verify, demo and
resume: the exit status is 0 pass, 1 fail, 3 recording failed, 128+N interrupted by signal N
(130 Ctrl-C)."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any


def warm(store: Any, session_id: str) -> None:
    """Index a finished session for replay, and keep its first frames, so its first replay
    opens fast."""
    import click

    from portside.store.replay_frames import warm_frames
    from portside.store.replay_source import warm_index

    try:
        store.recorder.flush()
        warm_index(store, session_id)
        warm_frames(store, session_id)  # the first frames of the start and the last alarm
    except Exception as exc:  # an index is a cache: never fail the command over it
        click.echo(f"portside: replay index not built: {exc}", err=True)


def drive(engine: Any, store: Any, *, headless: bool, as_json: bool = False,
          show_output: bool = False, after_seq: int = 0, interrupted: str = "",
          on_app: Any = None) -> int:
    """Run ``engine`` to its end. Headless: a live log on stderr (events after ``after_seq``:
    a resumed session's past is in the log already), then the summary or one JSON object.
    On the screen: the live app; quitting records the reviewer closing portside."""
    from rich.console import Console

    from portside.store import StoreError

    from .headless import ConsoleLog, emit_result, install_signal_handlers

    if headless:
        signals = install_signal_handlers(engine.interrupt)
        err = Console(stderr=True, highlight=False)
        log = ConsoleLog(err, show_output=show_output)
        engine.bus.subscribe(lambda e: log(e) if e.seq > after_seq else None)
        from portside.core.log.bus import RecordingFailed

        try:
            result = asyncio.run(engine.run())
            store.recorder.flush()  # the verdict stands only once its record is on disk
        except KeyboardInterrupt:  # 130 Ctrl-C, 143 SIGTERM, 129 SIGHUP
            return _interrupted(err, engine, interrupted, signals[0] if signals else 2)
        except (StoreError, RecordingFailed) as exc:
            return recording_failed(store, engine.session_id, exc)
        except Exception as exc:  # the engine recorded its end (reason) when it got that far
            err.print(f"portside: engine failed: {type(exc).__name__}: {exc}", markup=False)
            if engine.result is None:
                return 1
            result = engine.result
        warm(store, engine.session_id)
        if signals:  # stopped by SIGTERM/SIGHUP, and the session ended in good order
            return _interrupted(err, engine, interrupted, signals[0])
        data = result.to_json()
        # Said, not silent: the default criteria name no goal metric, so no goal was checked.
        data["goal_metric"] = getattr(getattr(engine.criteria, "goal", None), "metric", "") or None
        # Whether the verdict was decided before the run's end, and by what: the log's fold.
        from portside.core.log.decided import decided

        data["decided"] = decided(engine.ledger).to_json()
        return emit_result(data, as_json)
    from portside.tui.app import make_app

    app = make_app(bus=engine.bus, gate=engine.gate, info=engine.info, engine_run=engine.run,
                   engine_stop=lambda: engine.stop(REVIEWER_QUIT))
    app.on_terminal_gone = lambda: engine.interrupt("SIGHUP")  # a hangup nobody signalled
    if on_app is not None:  # work that must not hold the first frame (demo: torch_xla check)
        app.on_started = on_app

    def on_signal(name: str) -> None:
        engine.interrupt(name)
        app.end_by_signal(name)  # the app ends once the engine has, with nobody to read it

    signals = install_signal_handlers(on_signal)
    with contextlib.suppress(KeyboardInterrupt):  # a signal's grace ran out: asyncio
        app.run()                                 # cancelled the app
    if app.terminal_gone or "SIGHUP" in app.signalled:
        _quiet_stdio()  # writing to a hung-up terminal fails (EIO), at exit too
    engine.stop(REVIEWER_QUIT)
    try:
        store.recorder.flush()
    except StoreError as exc:
        return recording_failed(store, engine.session_id, exc)
    warm(store, engine.session_id)
    if signals or app.terminal_gone:
        err = Console(stderr=True, highlight=False)
        return _interrupted(err, engine, interrupted, signals[0] if signals else 1)
    if engine.result is None:
        return 1
    # Where the session went: quitting the screen left nothing to say what to do next.
    import click

    sid = engine.session_id
    click.echo(f"portside: session {sid} · verdict {engine.result.verdict} · "
               f"`portside replay {sid}` · `portside show {sid}`", err=True)
    return 0 if engine.result.verdict == "pass" else 1


def _quiet_stdio() -> None:
    """Point stdin, stdout and stderr at /dev/null: the terminal is gone."""
    import os

    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)


def _interrupted(err: Any, engine: Any, said: str, signum: int) -> int:
    """Say that a signal ended the session, and how to continue it; the exit status 128+N."""
    from portside.core.session.config import INTERRUPTED

    err.print(said or "interrupted: runs killed; the session is recorded as failed")
    if engine.result is not None and engine.result.outcome == INTERRUPTED:
        err.print(f"`portside run --resume {engine.session_id}` continues it", markup=False)
    return 128 + signum


REVIEWER_QUIT = "the reviewer closed portside"
# The exit status when the record could not be written (0 pass, 1 fail, 2 usage, 130 ^C).
EXIT_RECORDING_FAILED = 3


def recording_failed(store: Any, session_id: str, exc: BaseException) -> int:
    """The store could not record (the runs were stopped): close the session in the log if
    the file takes a write again, say what happened in one line, exit non-zero."""
    import click

    from portside.core.safety.terminal_text import clean_line
    from portside.store import DatabaseGone

    reason = clean_line(f"recording failed: {exc}", 400)
    closed = store.end_failed_session(session_id, reason)
    if isinstance(exc, DatabaseGone) or isinstance(exc.__cause__, DatabaseGone):
        where = f"the session went with the file; nothing was written at {store.path}"
    elif closed:
        where = "the session is closed in the log as failed"
    else:
        where = "the session could not be closed in the log (it will show as open)"
    click.echo(f"portside: {reason}; runs stopped; {where}", err=True)
    return EXIT_RECORDING_FAILED


def run_config(config: Any, store: Any, **how: Any) -> int:
    """A new session from ``config``, driven to its end; the store is closed after."""
    try:
        return drive(new_engine(config, store), store, **how)
    finally:
        store.close()


def new_engine(config: Any, store: Any, session_id: str | None = None) -> Any:
    from portside.core.session.engine import SessionEngine

    if config.workdir is None and config.work_root is None:
        config.work_root = Path(store.path).resolve().parent / "work"  # durable: --resume
    from .stored_references import reuse_references

    engine = SessionEngine(config, store.recorder, session_id=session_id)
    reuse_references(engine, store)  # references stored in this database, reused by key
    return engine
