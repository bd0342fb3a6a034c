"""The replay's kept first frame (store/replay_frames.py), issue 38.14c and 14e.

c: a run's 32 MiB of output is stored once, in the events: the kept frame names those events
   by seq and reads them back from the log (before, the frame held their bodies: the database
   grew by the output again when a session's frames were warmed).
e: the frame's tag is keyed (HMAC under this user's frame key, outside the database): a row
   crafted by whoever can write the file (a frame that shows something else, tagged with a
   plain sha256 as the old code checked) is refused, saying why, and the replay opens from
   the events.

Real SQLite through the store's own writer path; no process."""

from __future__ import annotations

import hashlib
import os
import sqlite3
from pathlib import Path

import msgspec
import pytest

from portside.core.log import events as ev
from portside.core.replay.player import DEFAULT_IDLE_LIMIT, FromSpec
from portside.store import Store
from portside.store.projections import Batch
from portside.store.replay_frames import FrameCache, point_key, warm_frames

SID = "big-output"
MIB = 1 << 20
LINE = "Train Epoch: 1 [0/60000] Loss: 0.1234 " + "x" * 160  # ~200 bytes
PER_EVENT = 80  # lines per run.output batch: ~16 KiB


def _session(db: Path, output_mib: int) -> int:
    """A session whose one run printed ``output_mib`` MiB; the bytes of output stored."""
    t = 1_800_000_000.0
    events: list[ev.Event] = [ev.SessionStarted(session_id=SID, project="/p", target="cpu",
                                                agent="scripted:x"),
                              ev.RunStarted(session_id=SID, run_id="ref1", role="reference",
                                            attempt=1, command="python train.py",
                                            target="cpu")]
    stored = 0
    step = 0
    while stored < output_mib * MIB:
        lines = [f"{LINE} {step}.{i}" for i in range(PER_EVENT)]
        stored += sum(len(x) for x in lines)
        events.append(ev.RunOutput(session_id=SID, run_id="ref1", lines=lines))
        step += 1
    events += [ev.RunFinished(session_id=SID, run_id="ref1", exit_code=0, outcome="passed",
                              wall_s=60.0),
               ev.AlarmRaised(session_id=SID, alarm_id="a1", check="numeric-drift",
                              severity="error", title="loss drifts", run_id="ref1"),
               ev.SessionEnded(session_id=SID, verdict="fail", outcome="failed-silent",
                               reason="numeric-drift")]
    store = Store(db)
    conn = store.conn
    batch = Batch()
    for seq, e in enumerate(events, start=1):
        e.seq, e.ts = seq, t + seq * 0.01
        batch.add(e, ev.encode(e))
    conn.execute("BEGIN IMMEDIATE")
    batch.write(conn)
    conn.execute("COMMIT")
    store.close()
    return stored


def _size(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("VACUUM")
    return os.path.getsize(db)


@pytest.fixture(autouse=True)
def _own_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))  # this test's frame key


def test_output_is_stored_once(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    output = _session(db, 32)
    before = _size(db)
    store = Store(db)
    assert warm_frames(store, SID) == 2  # the start and the last alarm
    with sqlite3.connect(db) as conn:
        blobs = [len(b) for (b,) in conn.execute("SELECT frame FROM replay_frames")]
    store.close()
    after = _size(db)
    print(f"output {output / MIB:.1f} MiB; db {before / MIB:.1f} MiB -> {after / MIB:.1f} MiB "
          f"with both frames warmed; frames {blobs} bytes")
    assert max(blobs) < 256 * 1024, blobs  # before: ~32 MiB each (the output again)
    assert after - before < MIB, (before, after)
    # The kept frame still shows the output: its events come back from the log.
    store = Store(db)
    frame = FrameCache(store, SID, point_key(None, DEFAULT_IDLE_LIMIT))
    loaded = frame.load()
    assert loaded is not None, frame.miss
    alarm = FrameCache(store, SID, point_key(FromSpec("alarm", None), DEFAULT_IDLE_LIMIT)).load()
    assert alarm is not None
    shown = [x for e in alarm.history[0] if isinstance(e, ev.RunOutput) for x in e.lines]
    assert shown and shown[-1].startswith(LINE)
    store.close()


def test_a_crafted_row_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    _session(db, 1)
    store = Store(db)
    warm_frames(store, SID)
    point = point_key(None, DEFAULT_IDLE_LIMIT)
    cache = FrameCache(store, SID, point)
    good = cache.load()
    assert good is not None, cache.miss
    conn = store.conn
    blob = bytes(conn.execute("SELECT frame FROM replay_frames WHERE point = ?",
                              (point,)).fetchone()[0])
    # The attacker's frame: a well-formed one that shows another clock and duration, with
    # the digest the row's column held before (a plain sha256 of the blob).
    wire = msgspec.json.decode(blob)
    wire["ts"], wire["duration"] = 0.0, 99_999.0
    crafted = msgspec.json.encode(wire)
    conn.execute("UPDATE replay_frames SET frame = ?, sha256 = ? WHERE point = ?",
                 (crafted, hashlib.sha256(crafted).hexdigest(), point))
    cache = FrameCache(store, SID, point)
    assert cache.load() is None
    assert cache.miss.startswith("refused: its tag does not match"), cache.miss
    # The right frame under another session's or point's name: refused too (the tag covers
    # whose it is).
    conn.execute("UPDATE replay_frames SET frame = ?, sha256 = (SELECT sha256 FROM"
                 " replay_frames WHERE point != ?) WHERE point = ?", (blob, point, point))
    assert FrameCache(store, SID, point).load() is None
    store.close()
