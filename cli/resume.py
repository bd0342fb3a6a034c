"""`portside run --resume SESSION`: continue a session whose engine was killed, from its log.

The log is the truth: the engine is rebuilt from ``session.started`` (its ``meta.resume``), the
runs and alarms already recorded, and the agent's events; see ``core/session/resume.py``. Runs that
went to hosts (``meta.hosts``) go to the same hosts again, each reached once before.
Headless, a session recorded with policy ``ask`` continues with ``auto`` (nobody to ask).
"""

from __future__ import annotations

from pathlib import Path

import click


def resume_session(ctx: click.Context, ref: str, db: Path | None, *, headless: bool,
                   as_json: bool = False, trust: bool = False) -> int:
    """Resume session ``ref`` (id, prefix or 'last'); returns the exit status (0 pass, 1 fail)."""
    from rich.console import Console
    from rich.text import Text

    from portside.core.log import events as ev
    from portside.core.session.config import SessionLocked
    from portside.core.session.resume import ResumeError, engine_from_log, final_end
    from portside.store import StoreError
    from portside.store.jsonl import refuse_untrusted_resume

    from .drive import drive
    from .options import attach_hosts, open_store, recorded_hosts, require_startable

    store = open_store(ctx, db)
    err = Console(stderr=True, highlight=False)
    try:
        try:
            sid = store.resolve_session(ref)
            refuse_untrusted_resume(store, sid, trust)  # an imported recording is data
        except StoreError as exc:
            raise click.ClickException(f"cannot resume: {exc}") from None
        log = list(store.events(sid))
        ended = final_end(log)
        if ended is not None:
            raise click.ClickException(
                f"cannot resume {sid}: it already ended (verdict {ended.verdict}: "
                f"{ended.reason}); `portside replay {sid}` shows it")
        started = log[0] if log and isinstance(log[0], ev.SessionStarted) else None
        recorded = started.meta.get("policy") if started else None
        policy = "auto" if headless and recorded in (None, "ask") else recorded
        try:
            engine = engine_from_log(log, store.recorder, policy=policy,
                                     mode="headless" if headless else "live")
            # the agent must be able to start before any run goes again (a key, a login)
            require_startable(engine.config.agent)
            engine.lock()  # refused while the first engine still runs
            from .stored_references import reuse_references

            reuse_references(engine, store)
        except (ResumeError, SessionLocked) as exc:
            raise click.ClickException(f"cannot resume {sid}: {exc}") from None
        last = log[-1].seq
        hosts, ssh_config, keep = recorded_hosts(engine.config.meta)
        err.print(Text(f"portside: resuming {sid} after seq {last} ({len(log)} events), "
                       f"policy {engine.config.policy}"))
        executors = attach_hosts(engine, hosts, ssh_config, keep)  # the runs go where they went
        try:
            return drive(engine, store, headless=headless, as_json=as_json, after_seq=last)
        finally:
            for executor in executors:
                executor.close()
    finally:
        store.close()
