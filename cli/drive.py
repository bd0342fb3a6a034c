"""One way to drive a session engine, headless or on the screen, for run, verify, demo and
resume: the exit status is 0 pass, 1 fail, 130 interrupted."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any


def warm(store: Any, session_id: str) -> None:
    """Index a finished session for replay now, so its first replay opens fast."""
    import click

    from portside.store.replay_source import warm_index

    try:
        store.recorder.flush()
        warm_index(store, session_id)
    except Exception as exc:  # an index is a cache: never fail the command over it
        click.echo(f"portside: replay index not built: {exc}", err=True)


def drive(engine: Any, store: Any, *, headless: bool, as_json: bool = False,
          show_output: bool = False, after_seq: int = 0, interrupted: str = "") -> int:
    """Run ``engine`` to its end. Headless: a live log on stderr (events after ``after_seq``:
    a resumed session's past is in the log already), then the summary or one JSON object.
    On the screen: the live app; quitting records the reviewer closing portside."""
    from rich.console import Console

    from .headless import ConsoleLog, emit_result

    if headless:
        err = Console(stderr=True, highlight=False)
        log = ConsoleLog(err, show_output=show_output)
        engine.bus.subscribe(lambda e: log(e) if e.seq > after_seq else None)
        try:
            result = asyncio.run(engine.run())
        except KeyboardInterrupt:
            err.print(interrupted or "interrupted: runs killed; the session is recorded as failed")
            return 130
        warm(store, engine.session_id)
        return emit_result(result.to_json(), as_json)
    from portside.tui.app import make_app

    app = make_app(bus=engine.bus, gate=engine.gate, info=engine.info, engine_run=engine.run,
                   engine_stop=lambda: engine.stop(REVIEWER_QUIT))
    app.run()
    engine.stop(REVIEWER_QUIT)
    warm(store, engine.session_id)
    if engine.result is None:
        return 1
    return 0 if engine.result.verdict == "pass" else 1


REVIEWER_QUIT = "the reviewer closed portside"


def new_engine(config: Any, store: Any, session_id: str | None = None) -> Any:
    from portside.core.engine import SessionEngine

    if config.workdir is None and config.work_root is None:
        config.work_root = Path(store.path).resolve().parent / "work"  # durable: --resume
    return SessionEngine(config, store.recorder, session_id=session_id)
