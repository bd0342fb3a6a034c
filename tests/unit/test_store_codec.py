"""Slim bodies (schema v5): every kind's event comes back equal and byte-canonical from a real
file, json_extract still reads every field of the kind, and a v4 file opens with nothing lost."""

from __future__ import annotations

import io
import json
import math
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tiers import examples

from portside.core.log import events as ev
from portside.core.safety.terminal_text import json_safe
from portside.store import Store
from portside.store.codec import SLIM_KINDS, full_body, stored_body
from portside.store.jsonl import export_session
from portside.store.projections import event_row
from portside.store.schema import SCHEMA_USER_VERSION
from tests.old_schema import database_at
from tests.unit.test_events import _strategy, any_event

ENVELOPE = ("kind", "session_id", "seq", "ts")
one_of_each = st.tuples(*[_strategy(cls) for cls in ev.EVENT_TYPES.values()])


@settings(max_examples=examples(400), deadline=None)
@given(any_event)
def test_a_row_gives_back_the_canonical_bytes(event: ev.Event) -> None:
    canonical = ev.encode(event).decode()
    row = event_row(event, ev.encode(event))
    assert row[4].encode() == stored_body(event, ev.encode(event))  # the slim form
    assert full_body(*row) == canonical
    stored, whole = json.loads(row[4]), json.loads(canonical)
    if row[3] in SLIM_KINDS:
        assert not set(ENVELOPE) & set(stored)
        assert stored == {k: v for k, v in whole.items() if k not in ENVELOPE}
        assert len(row[4]) < len(canonical)
    else:
        assert row[4] == canonical


def _write_v4(path: Path, events: list[ev.Event]) -> None:
    """A database as portside wrote it at schema v4: whole bodies (the ground truth here)."""
    conn = database_at(path, 4)
    conn.executemany("INSERT INTO events (session_id, seq, ts, kind, body) VALUES (?,?,?,?,?)",
                     [(e.session_id, e.seq, e.ts, type(e).__struct_config__.tag,
                       ev.encode(e).decode()) for e in events])
    conn.close()


def _check(store: Store, events: list[ev.Event]) -> None:
    sid = events[0].session_id
    assert list(store.events(sid)) == events
    out = io.BytesIO()
    export_session(store, sid, out)
    # The export writes DEL, C1 and bidi controls as \u escapes (the same JSON value).
    assert out.getvalue().split(b"\n")[1:-1] == [json_safe(ev.encode(e).decode()).encode()
                                                  for e in events]
    seqs = [r[0] for r in store.conn.execute(
        "SELECT seq FROM events WHERE session_id = ? ORDER BY seq", (sid,))]
    assert seqs == list(range(1, len(events) + 1))
    # Every field of every kind still reads with json_extract, as Datasette users query it.
    for e in events:
        whole = json.loads(ev.encode(e))
        for name, value in whole.items():
            if name in ENVELOPE:
                continue
            got = store.conn.execute(
                "SELECT json_extract(body, ?), json_type(body, ?) FROM events"
                " WHERE session_id = ? AND seq = ?", (f'$."{name}"', f'$."{name}"', sid, e.seq)
            ).fetchone()
            assert got[1] is not None, (e.seq, name)
            if isinstance(value, float):  # SQLite parses the text itself: to the last digit
                assert math.isclose(got[0], value, rel_tol=1e-12, abs_tol=1e-300), (e.seq, name)
            elif isinstance(value, str) and "\x00" in value:
                pass  # json_extract's text ends at a NUL (SQLite's, whatever the layout)
            elif not isinstance(value, dict | list | bool):
                assert got[0] == value, (e.seq, name)


@settings(max_examples=examples(15), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(one_of_each, one_of_each)
def test_every_kind_round_trips_through_a_v4_file_migrated_to_v5(
        old: tuple[ev.Event, ...], new: tuple[ev.Event, ...]) -> None:
    events = [*old, *new]
    for seq, e in enumerate(events, start=1):
        e.session_id, e.seq = "sess-1", seq
        e.ts = e.ts or 1.0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "old.db"
        _write_v4(path, list(old))
        with Store(path) as store:  # migrates to v5, then appends slim rows after the old ones
            assert store.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_USER_VERSION
            for e in new:
                store.recorder.append(e)
            store.recorder.flush()
            _check(store, events)
            slim = store.conn.execute(
                "SELECT COUNT(*) FROM events WHERE seq > ? AND kind IN ('run.output', 'run.record')"
                " AND json_type(body, '$.session_id') IS NULL", (len(old),)).fetchone()[0]
            assert slim == 2  # the new run.output and run.record rows are stored slim
        with Store(path) as store:  # reopened: the same again
            _check(store, events)
