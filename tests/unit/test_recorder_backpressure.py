"""The writer's queue is bounded: a producer faster than the writer waits for it instead of
growing the queue without end (the 1M x 8 real path reached 11.5 GB with the writer minutes
behind), and a producer waiting for room never hangs when recording fails."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

from portside.core.log import events as ev
from portside.store import StoreError
from portside.store.recorder import Recorder

LINE = "x" * 1000


def _output(i: int) -> ev.RunOutput:
    return ev.RunOutput(session_id="s1", run_id="r1", lines=[f"{i} {LINE}"])


def _produce(rec: Recorder, n: int, sent: list[int], errors: list[BaseException]) -> None:
    try:
        for i in range(n):
            rec.append(_output(i))
            sent.append(i)
    except BaseException as exc:  # noqa: BLE001 - the test reads what the producer met
        errors.append(exc)


def test_a_producer_waits_for_a_writer_held_back_by_a_lock(tmp_path: Path) -> None:
    db = tmp_path / "q.db"
    rec = Recorder(db, busy_timeout_s=0.05, max_queued_bytes=64_000)
    rec.append(ev.SessionStarted(session_id="s1", project="/p", target="cpu"))
    rec.flush()
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another writer holds the lock: ours retries
    sent: list[int] = []
    errors: list[BaseException] = []
    producer = threading.Thread(target=_produce, args=(rec, 2000, sent, errors))
    producer.start()
    time.sleep(1.0)
    held = len(sent)
    # One batch in the writer's hands plus one queued: ~2 x 64 kB of ~1 kB bodies, not 2,000.
    assert held < 300, f"{held} events queued while the writer could not commit"
    assert producer.is_alive()
    other.execute("COMMIT")
    other.close()
    producer.join(60)
    assert not producer.is_alive() and not errors
    rec.flush()
    rec.close()
    seqs = [r[0] for r in sqlite3.connect(db).execute(
        "SELECT seq FROM events WHERE session_id = 's1' ORDER BY seq")]
    assert seqs == list(range(1, 2002))  # nothing dropped, no gap


def test_a_producer_waiting_for_room_raises_when_recording_fails(tmp_path: Path) -> None:
    db = tmp_path / "f.db"
    rec = Recorder(db, busy_timeout_s=0.05, patience_s=0.5, max_queued_bytes=64_000)
    rec.append(ev.SessionStarted(session_id="s1", project="/p", target="cpu"))
    rec.flush()
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # held past the writer's patience
    sent: list[int] = []
    errors: list[BaseException] = []
    producer = threading.Thread(target=_produce, args=(rec, 100_000, sent, errors))
    producer.start()
    producer.join(20)
    other.execute("ROLLBACK")
    other.close()
    assert not producer.is_alive(), "a producer waiting for room outlived the writer"
    assert errors and isinstance(errors[0], StoreError)
    assert "recording failed" in str(errors[0])
    with pytest.raises(StoreError):
        rec.close()
