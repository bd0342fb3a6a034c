"""`portside run --resume SESSION`: continue a session whose engine was killed, from its log.

The log is the truth: the engine is rebuilt from ``session.started`` (its ``meta.resume``), the
runs and alarms already recorded, and the agent's events; see ``SessionEngine.from_log``.
Headless, a session recorded with policy ``ask`` continues with ``auto`` (nobody to ask).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import click


def resume_session(ctx: click.Context, ref: str, db: Path | None, *, headless: bool,
                   as_json: bool = False, trust: bool = False) -> int:
    """Resume session ``ref`` (id, prefix or 'last'); returns the exit status (0 pass, 1 fail)."""
    from rich.console import Console
    from rich.text import Text

    from portside.core import events as ev
    from portside.core.session import ResumeError, SessionEngine
    from portside.store import StoreError
    from portside.store.jsonl import refuse_untrusted_resume

    from .cli import _open_store

    store = _open_store(ctx, db)
    err = Console(stderr=True, highlight=False)
    try:
        try:
            sid = store.resolve_session(ref)
            refuse_untrusted_resume(store, sid, trust)  # an imported recording is data
        except StoreError as exc:
            raise click.ClickException(f"cannot resume: {exc}") from None
        log = list(store.events(sid))
        ended = next((e for e in log if isinstance(e, ev.SessionEnded)), None)
        if ended is not None:
            raise click.ClickException(
                f"cannot resume {sid}: it already ended (verdict {ended.verdict}: "
                f"{ended.reason}); `portside replay {sid}` shows it")
        started = log[0] if log and isinstance(log[0], ev.SessionStarted) else None
        recorded = started.meta.get("policy") if started else None
        policy = "auto" if headless and recorded in (None, "ask") else recorded
        try:
            engine = SessionEngine.from_log(log, store.recorder, policy=policy,
                                            mode="headless" if headless else "live")
            engine.lock()  # refused while the first engine still runs
        except ResumeError as exc:
            raise click.ClickException(f"cannot resume {sid}: {exc}") from None
        last = log[-1].seq
        err.print(Text(f"portside: resuming {sid} after seq {last} ({len(log)} events), "
                       f"policy {engine.config.policy}"))
        if headless:
            return _headless(engine, err, last, as_json)
        from .app import make_app

        app = make_app(bus=engine.bus, gate=engine.gate, info=engine.info, engine_run=engine.run)
        app.run()
        engine.stop("the reviewer closed portside")
        if engine.result is None:
            return 1
        return 0 if engine.result.verdict == "pass" else 1
    finally:
        store.close()


def _headless(engine: Any, err: Any, last_seq: int, as_json: bool) -> int:

    from .headless import ConsoleLog, emit_result

    log = ConsoleLog(err)

    def new_only(event: Any) -> None:
        if event.seq > last_seq:  # the past is in the log already; print what happens now
            log(event)

    engine.bus.subscribe(new_only)
    try:
        result = asyncio.run(engine.run())
    except KeyboardInterrupt:
        err.print("interrupted: runs killed; the session is recorded as failed")
        return 130
    data = result.to_json()
    return emit_result(data, as_json)
