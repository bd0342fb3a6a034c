"""The store: WAL, versioned schema, gap-free seq, derived tables in the event's transaction."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

from portside.core.log import events as ev
from portside.store import Store, StoreError
from portside.store.schema import SCHEMA_USER_VERSION


def _start(store: Store, sid: str = "s1") -> None:
    store.recorder.append(ev.SessionStarted(session_id=sid, project="/p", target="tpu"))


def test_file_is_wal_and_versioned(store: Store, db_path: Path) -> None:
    _start(store)
    store.recorder.flush()
    raw = sqlite3.connect(db_path)
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_USER_VERSION
    tables = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type IN"
                                        " ('table', 'view')")}
    assert {"events", "sessions", "runs", "alarms", "interventions", "metrics"} <= tables


def test_newer_schema_is_refused(db_path: Path) -> None:
    Store(db_path).close()
    raw = sqlite3.connect(db_path)
    raw.execute("PRAGMA user_version = 99")
    raw.close()
    with pytest.raises(StoreError, match="newer than this portside"):
        Store(db_path)


def test_seq_is_gap_free_across_threads_and_sessions(store: Store) -> None:
    rec = store.recorder
    for sid in ("a", "b"):
        _start(store, sid)

    def produce(sid: str) -> None:
        for i in range(500):
            rec.append(ev.RunOutput(session_id=sid, run_id="r", lines=[f"line {i}"]))

    threads = [threading.Thread(target=produce, args=(sid,)) for sid in ("a", "b", "a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rec.flush()
    for sid in ("a", "b"):
        seqs = [r[0] for r in store.conn.execute(
            "SELECT seq FROM events WHERE session_id=? ORDER BY seq", (sid,))]
        assert seqs == list(range(1, 1002))


def test_seq_resumes_after_reopen(db_path: Path) -> None:
    with Store(db_path) as s:
        _start(s)
        s.recorder.append(ev.AgentText(session_id="s1", text="hi"))
    with Store(db_path) as s:
        e = s.recorder.append(ev.AgentText(session_id="s1", text="again"))
        assert e.seq == 3


def test_derived_tables_follow_events(store: Store) -> None:
    rec = store.recorder
    _start(store)
    rec.append(ev.RunStarted(session_id="s1", run_id="r1", role="candidate", attempt=1,
                             command="python t.py", target="tpu"))
    rec.append(ev.RunRecord(session_id="s1", run_id="r1", records=[
        {"type": "step", "step": 0, "loss": 2.5, "grad_norm": "nan", "lr": [0.1, 0.2]},
        {"type": "metric", "name": "accuracy", "value": 91.5, "step": None},
        {"type": "facts", "backend": "cpu"},
    ]))
    rec.append(ev.RunFinished(session_id="s1", run_id="r1", exit_code=0, outcome="failed-silent",
                              wall_s=3.0, metrics={"accuracy": 91.5}))
    rec.append(ev.AlarmRaised(session_id="s1", alarm_id="al1", check="wrong-hardware",
                              severity="error", title="CPU, not TPU", evidence={"kind": "CPU"}))
    rec.append(ev.AlarmAcknowledged(session_id="s1", alarm_id="al1", by="ana"))
    t0 = time.time()
    rec.record_intervention(ev.Intervention(
        session_id="s1", intervention_id="i1", action="acknowledge-alarm", steering=False,
        attention_started_at=t0 - 4.0, decided_at=t0, target_id="al1", reviewer="ana"))
    rec.flush()
    run = store.runs("s1")[0]
    assert (run["outcome"], run["exit_code"], run["metrics"]) == ("failed-silent", 0, {"accuracy": 91.5})
    metrics = {(r[0], r[1]): r[2] for r in store.conn.execute("SELECT name, step, value FROM metrics")}
    assert metrics[("loss", 0)] == 2.5
    assert metrics[("lr", 0)] == 0.1
    assert metrics[("accuracy", None)] == 91.5
    # SQL has no NaN: the derived row holds NULL, the event body keeps "nan".
    assert metrics[("grad_norm", 0)] is None
    alarm = store.alarms("s1")[0]
    assert alarm["acknowledged_by"] == "ana" and alarm["evidence"] == {"kind": "CPU"}
    inter = store.interventions("s1")[0]
    assert inter["attention_s"] == pytest.approx(4.0)
    summary = store.session("s1")
    assert (summary["attempts"], summary["failures"], summary["silent_failures"]) == (1, 1, 1)
    assert summary["interventions"] == 1 and summary["steering"] == 0


def test_intervention_is_committed_when_the_call_returns(store: Store, db_path: Path) -> None:
    _start(store)
    store.recorder.record_intervention(ev.Intervention(
        session_id="s1", intervention_id="i9", action="reject", steering=True,
        attention_started_at=1.0, decided_at=2.0, note="keeps clipping"))
    # Another connection (as another process would) sees it without any flush.
    other = sqlite3.connect(db_path)
    assert other.execute("SELECT note FROM interventions").fetchone() == ("keeps clipping",)


def test_readers_do_not_block_the_writer(store: Store, db_path: Path) -> None:
    _start(store)
    store.recorder.flush()
    reader = sqlite3.connect(db_path)
    reader.execute("BEGIN")
    reader.execute("SELECT COUNT(*) FROM events").fetchone()  # holds a read snapshot open
    t0 = time.perf_counter()
    store.recorder.append_durable(ev.AgentText(session_id="s1", text="x"))
    assert time.perf_counter() - t0 < 5
    # The open snapshot still sees the old state; a new one sees the write.
    assert reader.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 1
    reader.execute("COMMIT")
    assert reader.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 2


def test_not_a_database_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "notes.txt"
    bad.write_text("hello, not sqlite\n" * 100)
    with pytest.raises(sqlite3.DatabaseError):
        Store(bad)


def test_closed_recorder_refuses(store: Store) -> None:
    rec = store.recorder
    rec.close()
    with pytest.raises(StoreError, match="closed"):
        rec.append(ev.AgentText(session_id="s1", text="late"))


def test_resolve_session(store: Store) -> None:
    _start(store, "20261129-aaaa")
    _start(store, "20261129-bbbb")
    store.recorder.flush()
    assert store.resolve_session("20261129-a") == "20261129-aaaa"
    with pytest.raises(StoreError, match="several"):
        store.resolve_session("20261129")
    with pytest.raises(StoreError, match="no session"):
        store.resolve_session("zzz")


@pytest.mark.parametrize("n", [0, 1, 3, 4, 5, 17, 1023, 4096, 5461])
@pytest.mark.parametrize("var_limit", [None, 999])
def test_insert_rows_writes_every_row_in_order(n: int, var_limit: int | None) -> None:
    # Many rows per statement, split into fixed sizes: nothing lost, doubled or reordered, values
    # exact, and INSERT OR REPLACE still lets the later row win. An old SQLite's 999-variable
    # limit only makes the statements smaller.
    from portside.store.projections import insert_rows

    conn = sqlite3.connect(":memory:")
    if var_limit is not None:
        conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, var_limit)
    conn.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, x REAL, s TEXT, z)")
    rows = [(i % max(1, n - 2), i / 7, f"row {i} \"q\"", None if i % 3 else b"\x00") for i in range(n)]
    insert_rows(conn, "INSERT OR REPLACE INTO t (k, x, s, z) VALUES (?, ?, ?, ?)", rows)
    want: dict[int, tuple] = {}
    for r in rows:
        want[r[0]] = r
    got = conn.execute("SELECT k, x, s, z FROM t ORDER BY k").fetchall()
    assert got == [want[k] for k in sorted(want)]
    conn.execute("CREATE TABLE log (i INTEGER, v TEXT)")
    seq = [(i, f"v{i}") for i in range(n)]
    insert_rows(conn, "INSERT INTO log (i, v) VALUES (?, ?)", seq)
    assert conn.execute("SELECT i, v FROM log ORDER BY rowid").fetchall() == seq
