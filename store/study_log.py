"""A study's view of the database: the one writer for its events, the logs it resumes from,
and which session holds which task (``session.started`` ``meta.study``)."""

from __future__ import annotations

import json
from typing import Any

from portside.core.log import events as ev

from .queries import Store


def _studies(store: Store) -> list[tuple[str, float, dict[str, Any]]]:
    """(session, started, meta.study) of every session a study ran, oldest first."""
    out = []
    rows = store.conn.execute(
        "SELECT session_id, ts FROM events WHERE kind = 'session.started' ORDER BY ts").fetchall()
    for sid, ts in rows:
        body = next(store.event_bodies(sid, kinds=["session.started"]), None)
        if body is None:
            continue
        meta = json.loads(body).get("meta") or {}
        info = meta.get("study") if isinstance(meta, dict) else None
        if isinstance(info, dict) and info.get("name") and info.get("task"):
            out.append((sid, ts, info))
    return out


def study_sessions(store: Store, study: str) -> dict[str, str]:
    """task id -> the session holding it (the latest started, should there be several)."""
    return {str(info["task"]): sid for sid, _, info in _studies(store)
            if info.get("name") == study}


def session_studies(store: Store) -> dict[str, tuple[str, str]]:
    """session -> (study, task), for the sessions screen's grouping."""
    return {sid: (str(info["name"]), str(info["task"])) for sid, _, info in _studies(store)}


class StoreStudyLog:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.recorder = store.recorder

    def find(self, study: str) -> dict[str, str]:
        return study_sessions(self.store, study)

    def events(self, session_id: str) -> list[ev.Event]:
        self.recorder.flush()
        return list(self.store.events(session_id))

    def append(self, event: ev.Event) -> None:
        self.recorder.append(event)

    def flush(self) -> None:
        self.recorder.flush()

    def info(self) -> dict[str, Any]:
        return {"path": str(self.store.path)}
