"""Portable recordings: one session as JSONL, a header line then one event per line.

Export writes the events' canonical bytes, so export → import → export is byte-identical.
Import validates the whole file before writing anything and commits it in one transaction:
a malformed file is refused whole with ``file:line: what is wrong``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from portside.core import events as ev

from .projections import Batch
from .queries import Store
from .schema import StoreError

FORMAT = "portside-recording"


class RecordingError(ValueError):
    """A recording that cannot be imported; the message starts with ``file:line:``."""


def header(session_id: str, count: int) -> dict[str, Any]:
    return {"format": FORMAT, "schema": ev.SCHEMA_VERSION, "session_id": session_id, "events": count}


def export_session(store: Store, session_id: str, out: IO[bytes]) -> int:
    """Write the session to ``out``; returns the number of events."""
    count = store.event_count(session_id)
    out.write(json.dumps(header(session_id, count), sort_keys=True).encode() + b"\n")
    for body in store.event_bodies(session_id):
        out.write(body.encode() + b"\n")
    return count


def export_to_file(store: Store, session_id: str, path: str | Path) -> int:
    with open(path, "wb") as fh:
        return export_session(store, session_id, fh)


def read_recording(path: str | Path, rename_to: str | None = None) -> list[ev.Event]:
    """Parse and validate a recording; raises RecordingError naming file and line."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise RecordingError(f"{path}: cannot read: {exc.strerror}") from None
    return parse_recording(data.splitlines(), str(path), rename_to)


def parse_recording(
    lines: Iterable[bytes], source: str, rename_to: str | None = None
) -> list[ev.Event]:
    events: list[ev.Event] = []
    session_id: Any = ""  # the header's, checked to be a non-empty str before use
    expected: Any = 0  # the header's, checked to be a count before use
    for lineno, raw in enumerate(lines, start=1):
        where = f"{source}:{lineno}"
        if lineno == 1:
            try:
                head = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise RecordingError(f"{where}: header is not JSON: {exc}") from None
            if not isinstance(head, dict) or head.get("format") != FORMAT:
                raise RecordingError(f"{where}: not a portside recording (header format != {FORMAT!r})")
            if head.get("schema") != ev.SCHEMA_VERSION:
                raise RecordingError(
                    f"{where}: schema {head.get('schema')!r} is not supported "
                    f"(this portside reads schema {ev.SCHEMA_VERSION})"
                )
            session_id = head.get("session_id")
            if not isinstance(session_id, str) or not session_id:
                raise RecordingError(f"{where}: header field session_id: missing")
            expected = head.get("events")
            if not isinstance(expected, int) or expected < 0:
                raise RecordingError(f"{where}: header field events: must be a count")
            continue
        if not raw.strip():
            raise RecordingError(f"{where}: empty line")
        try:
            event = ev.decode(raw)
        except ev.EventError as exc:
            raise RecordingError(f"{where}: {exc}") from None
        if event.session_id != session_id:
            raise RecordingError(
                f"{where}: field session_id: {event.session_id!r} differs from the header's "
                f"{session_id!r}"
            )
        if event.seq != len(events) + 1:
            raise RecordingError(f"{where}: field seq: expected {len(events) + 1}, got {event.seq}")
        events.append(event)
    if not session_id:
        raise RecordingError(f"{source}:1: empty file")
    if len(events) != expected:
        raise RecordingError(
            f"{source}:{len(events) + 2}: file ends after {len(events)} events; "
            f"the header promises {expected} (truncated?)"
        )
    if not events or not isinstance(events[0], ev.SessionStarted):
        raise RecordingError(f"{source}:2: the first event must be session.started")
    if rename_to:
        for event in events:
            event.session_id = rename_to
    return events


def import_events(store: Store, events: list[ev.Event], source: str = "") -> str:
    """Write a validated recording in one transaction; refuses a session id already present."""
    session_id = events[0].session_id
    conn = store.conn
    if conn.execute("SELECT 1 FROM events WHERE session_id = ? LIMIT 1", (session_id,)).fetchone():
        raise StoreError(
            f"{source or store.path}: session {session_id} is already in {store.path} "
            "(import it under another id with --as NEW_ID)"
        )
    batch = Batch()
    for event in events:
        batch.add(event, ev.encode(event))
    conn.execute("BEGIN IMMEDIATE")
    try:
        batch.write(conn)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return session_id


def import_file(store: Store, path: str | Path, rename_to: str | None = None) -> str:
    return import_events(store, read_recording(path, rename_to), str(path))
