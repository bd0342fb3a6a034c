"""Recordings: byte-stable round trip; a malformed file is refused whole, naming file:line."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from portside.core.log import events as ev
from portside.store import Store
from portside.store.jsonl import RecordingError, export_session, import_file


def _session(store: Store, sid: str = "rec-1") -> None:
    rec = store.recorder
    rec.append(ev.SessionStarted(session_id=sid, project="/p", target="xla:cpu", agent="scripted:x"))
    rec.append(ev.EditProposed(session_id=sid, edit_id="e1", path="train.py",
                               before="a = 1\n", after="a = 2\n"))
    rec.append(ev.RunOutput(session_id=sid, run_id="r", lines=["ünïcode ✓", "\x1b[31mred\x1b[0m"]))
    rec.append(ev.RunRecord(session_id=sid, run_id="r", records=[{"type": "step", "step": 0,
                                                                   "loss": 0.1 + 0.2}]))
    rec.record_intervention(ev.Intervention(
        session_id=sid, intervention_id="i1", action="approve", steering=False,
        attention_started_at=10.0, decided_at=12.5))
    rec.append(ev.SessionEnded(session_id=sid, verdict="fail", outcome="failed-silent"))
    rec.flush()


def _export(store: Store, sid: str) -> bytes:
    buf = io.BytesIO()
    export_session(store, sid, buf)
    return buf.getvalue()


def test_round_trip_is_byte_stable(tmp_path: Path) -> None:
    with Store(tmp_path / "a.db") as a:
        _session(a)
        first = _export(a, "rec-1")
    path = tmp_path / "rec.jsonl"
    path.write_bytes(first)
    with Store(tmp_path / "b.db") as b:
        assert import_file(b, path) == "rec-1"
        assert _export(b, "rec-1") == first
        assert b.interventions("rec-1")[0]["attention_s"] == pytest.approx(2.5)
        assert b.session("rec-1")["verdict"] == "fail"


def test_import_under_another_id(tmp_path: Path) -> None:
    with Store(tmp_path / "a.db") as a:
        _session(a)
        path = tmp_path / "rec.jsonl"
        path.write_bytes(_export(a, "rec-1"))
        with pytest.raises(Exception, match="already in"):
            import_file(a, path)
        assert import_file(a, path, rename_to="copy") == "copy"
        assert a.event_count("copy") == a.event_count("rec-1")


def _corrupt(lines: list[bytes], n: int, new: bytes | None) -> list[bytes]:
    out = list(lines)
    if new is None:
        del out[n]
    else:
        out[n] = new
    return out


@pytest.mark.parametrize(
    ("mutate", "expect"),
    [
        (lambda ls: _corrupt(ls, 0, b'{"format":"other"}'), r":1: not a portside recording"),
        (lambda ls: _corrupt(ls, 0, b'{"format":"portside-recording","schema":7,'
                                    b'"session_id":"rec-1","events":6}'), r":1: schema 7"),
        (lambda ls: _corrupt(ls, 3, b'{"kind":"run.output","session_id":"rec-1","seq":3,'
                                    b'"lines":"oops"}'), r":4: field lines: Expected `array`"),
        (lambda ls: _corrupt(ls, 3, ls[3][:-5]), r":4: not valid JSON"),
        (lambda ls: _corrupt(ls, 2, None), r":3: field seq: expected 2, got 3"),
        (lambda ls: ls[:-1], r":7: file ends after 5 events"),
        (lambda ls: _corrupt(ls, 2, ls[2].replace(b'"rec-1"', b'"other"')),
         r":3: field session_id"),
        (lambda ls: _corrupt(ls, 4, b""), r":5: empty line"),
    ],
)
def test_malformed_recording_is_refused_whole(tmp_path: Path, mutate, expect: str) -> None:
    with Store(tmp_path / "a.db") as a:
        _session(a)
        lines = _export(a, "rec-1").splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"\n".join(mutate(lines)) + b"\n")
    with Store(tmp_path / "b.db") as b:
        with pytest.raises(RecordingError, match=expect) as info:
            import_file(b, bad)
        assert str(info.value).startswith(str(bad) + ":")
        assert b.conn.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 0
        assert b.conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0] == 0
