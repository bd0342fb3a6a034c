"""`portside import --codex ROLLOUT.jsonl`: thin glue over core/codex/rollout.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .import_cc import _usage_error


def import_codex(store: Any, file: Path, rename_to: str | None, target: str | None) -> str:
    """Read the whole rollout, then write it in one transaction: a malformed file (exit 2,
    ``file:line: what``) or a session already present writes nothing."""
    from portside.core.agent.imported import TranscriptError
    from portside.core.codex.rollout import read_codex
    from portside.store import StoreError
    from portside.store.jsonl import import_events, session_id_problem

    if rename_to and (problem := session_id_problem(rename_to)):
        _usage_error(f"--as: {problem}")
    try:
        events = read_codex(file, session_id=rename_to, target=target or "")
        if problem := session_id_problem(events[0].session_id):
            raise TranscriptError(f"{file}:1: session id: {problem}")
        return str(import_events(store, events, str(file)))
    except (TranscriptError, StoreError) as exc:
        store.close()
        _usage_error(str(exc))
