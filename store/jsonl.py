"""Portable recordings: one session as JSONL, a header line then one event per line.

Export writes the events' canonical bytes, with DEL, C1 and bidi controls as \\u escapes (the
same JSON: nothing a run printed can drive the terminal the file is shown on), so export →
import → export is byte-identical.
Import validates the whole file before writing anything and commits it in one transaction:
a malformed file is refused whole with ``file:line: what is wrong``.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from portside.core.log import events as ev
from portside.core.safety.secrets import mask_event
from portside.core.safety.terminal_text import json_safe

from .projections import Batch
from .queries import Store
from .schema import StoreError

FORMAT = "portside-recording"


class RecordingError(ValueError):
    """A recording that cannot be imported; the message starts with ``file:line:``."""


# A session id names a row, a file and a terminal line: plain characters only, so an imported
# id can carry no escape sequence and no rich markup ("[/").
_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")


def session_id_problem(value: object) -> str | None:
    """What is wrong with ``value`` as a session id, or None."""
    if not isinstance(value, str) or not value:
        return "missing"
    if not _SESSION_ID.fullmatch(value):
        return (f"{ascii(value)[:80]} is not a session id (letters, digits and . _ : -, "
                "at most 128, starting with a letter or digit)")
    return None


def header(session_id: str, count: int) -> dict[str, Any]:
    return {"format": FORMAT, "schema": ev.SCHEMA_VERSION, "session_id": session_id, "events": count}


def export_session(store: Store, session_id: str, out: IO[bytes]) -> int:
    """Write the session to ``out``; returns the number of events."""
    count = store.event_count(session_id)
    out.write(json.dumps(header(session_id, count), sort_keys=True).encode() + b"\n")
    for body in store.event_bodies(session_id):
        out.write(json_safe(body).encode() + b"\n")
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
            except RecursionError:
                raise RecordingError(f"{where}: header is nested too deep") from None
            if not isinstance(head, dict) or head.get("format") != FORMAT:
                raise RecordingError(f"{where}: not a portside recording (header format != {FORMAT!r})")
            if head.get("schema") != ev.SCHEMA_VERSION:
                raise RecordingError(
                    f"{where}: schema {head.get('schema')!r} is not supported "
                    f"(this portside reads schema {ev.SCHEMA_VERSION})"
                )
            session_id = head.get("session_id")
            problem = session_id_problem(session_id)
            if problem:
                raise RecordingError(f"{where}: header field session_id: {problem}")
            expected = head.get("events")
            if not isinstance(expected, int) or isinstance(expected, bool) or expected < 0:
                raise RecordingError(f"{where}: header field events: must be a count")
            continue
        if not raw.strip():
            raise RecordingError(f"{where}: empty line")
        try:
            event = ev.decode(raw)
            ev.check_payload(event)
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
        problem = session_id_problem(rename_to)
        if problem:
            raise RecordingError(f"{source}:1: --as: {problem}")
        for event in events:
            event.session_id = rename_to
    return events


def import_events(store: Store, events: list[ev.Event], source: str = "") -> str:
    """Write a validated recording in one transaction; refuses a session id already present."""
    session_id = events[0].session_id
    conn = store.conn
    if conn.execute("SELECT 1 FROM events WHERE session_id = ? LIMIT 1", (session_id,)).fetchone():
        raise StoreError(
            f"{source or store.path}:1: session {session_id} is already in {store.path} "
            "(import it under another id with --as NEW_ID)"
        )
    batch = Batch()
    for event in events:
        mask_event(event)  # a foreign recording comes past the bus: its tokens stop here too
        batch.add(event, ev.encode(event))
    conn.execute("BEGIN IMMEDIATE")
    try:
        batch.write(conn)
        conn.execute(
            "INSERT OR REPLACE INTO imports (session_id, source, imported_at) VALUES (?, ?, ?)",
            (session_id, source, time.time()),
        )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return session_id


def import_file(store: Store, path: str | Path, rename_to: str | None = None) -> str:
    return import_events(store, read_recording(path, rename_to), str(path))


def imported_from(store: Store, session_id: str) -> str | None:
    """Where an imported session came from (the file it was imported from), else None."""
    row = store.conn.execute(
        "SELECT source FROM imports WHERE session_id = ?", (session_id,)
    ).fetchone()
    return None if row is None else (row[0] or "a recording")


def refuse_untrusted_resume(store: Store, session_id: str, trust: bool) -> None:
    """A recording is data, not instructions: resuming an imported session would run its
    commands with its environment in its workdir. Refused unless the user says --trust."""
    source = imported_from(store, session_id)
    if source is not None and not trust:
        raise StoreError(
            f"session {session_id} was imported from {ascii(source)[1:-1]}: resuming it would run "
            "the recording's commands, environment and workdir on this machine; pass --trust "
            "if you trust that recording"
        )
