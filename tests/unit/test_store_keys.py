"""Derived rows are keyed by session: a copy or a colliding run id never takes over another
session's runs, alarms or interventions (issue 13 item 3), and a v2 database is repaired."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from cli_run import cli_in_process

from portside.core.log import events as ev
from portside.store import Store
from portside.store.schema import SCHEMA_USER_VERSION
from tests.old_schema import database_at

RECORDING = Path(__file__).parents[2] / "sessions" / "recordings" / "demo.jsonl"


def test_import_twice_keeps_both_sessions_runs(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    first = cli_in_process("import", str(RECORDING), db=db)
    assert first.returncode == 0, first.stderr
    copy = cli_in_process("import", str(RECORDING), "--as", "COPY", db=db)
    assert copy.returncode == 0, copy.stderr
    with Store(db) as store:
        (orig,) = [r["session_id"] for r in store.sessions() if r["session_id"] != "COPY"]
        # Ground truth from the recording itself: how many runs and alarms it holds.
        events = [ev.decode(line) for line in RECORDING.read_bytes().splitlines()[1:]]
        n_runs = sum(isinstance(e, ev.RunStarted) for e in events)
        n_alarms = sum(isinstance(e, ev.AlarmRaised) for e in events)
        assert n_runs > 0 and n_alarms > 0
        for sid in (orig, "COPY"):
            assert len(store.runs(sid)) == n_runs
            assert len(store.alarms(sid)) == n_alarms
    for sid in (orig, "COPY"):
        report = cli_in_process("export", sid, "--what", "report", db=db)
        assert report.returncode == 0, report.stderr
        assert "No runs." not in report.stdout
        run_id = next(e.run_id for e in events if isinstance(e, ev.RunStarted))
        assert run_id in report.stdout


def test_colliding_run_ids_in_two_live_sessions(tmp_path: Path) -> None:
    with Store(tmp_path / "p.db") as store:
        rec = store.recorder
        for sid in ("a", "b"):
            rec.append(ev.SessionStarted(session_id=sid, project="/p", target="cpu"))
            rec.append(ev.RunStarted(session_id=sid, run_id="ref1-abcdef", role="reference",
                                     attempt=1, command=f"cmd {sid}", target="cpu"))
            rec.append(ev.RunFinished(session_id=sid, run_id="ref1-abcdef", exit_code=0,
                                      outcome="passed"))
            rec.append(ev.AlarmRaised(session_id=sid, alarm_id="al-1", check="slow",
                                      severity="info", title=f"slow {sid}"))
        rec.flush()
        for sid in ("a", "b"):
            (run,) = store.runs(sid)
            assert run["command"] == f"cmd {sid}" and run["outcome"] == "passed"
            (alarm,) = store.alarms(sid)
            assert alarm["title"] == f"slow {sid}"


def test_v2_database_is_migrated_and_repaired(tmp_path: Path) -> None:
    """A v2 DB whose copy took over the original's run: v3 rebuilds both from the log."""
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    import sqlite_utils

    from portside.store.schema import MIGRATIONS, migrate

    db = sqlite_utils.Database(conn)
    for m in MIGRATIONS[:2]:
        m(db)
    conn.execute("PRAGMA user_version = 2")
    from portside.store.projections import Batch

    batch = Batch()
    for sid in ("orig", "copy"):
        for seq, e in enumerate([
            ev.SessionStarted(session_id=sid, project="/p", target="cpu", ts=1.0),
            ev.RunStarted(session_id=sid, run_id="r1", role="candidate", attempt=1,
                          command="c", target="cpu", ts=2.0),
        ], start=1):
            e.seq = seq
            batch.add(e, ev.encode(e))
    conn.execute("BEGIN")
    batch.events.sort()
    from portside.store.projections import insert_rows

    insert_rows(conn, "INSERT INTO events (session_id, seq, ts, kind, body) VALUES (?,?,?,?,?)",
                batch.events)
    for sql, rows in batch.inserts.items():  # the v2 INSERT OR REPLACE by run_id alone
        insert_rows(conn, sql, rows)
    conn.execute("COMMIT")
    assert conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 1  # the takeover
    assert migrate(conn, path) == SCHEMA_USER_VERSION == len(MIGRATIONS)
    conn.close()
    with Store(path) as store:
        assert [r["run_id"] for r in store.runs("orig")] == ["r1"]
        assert [r["run_id"] for r in store.runs("copy")] == ["r1"]
        assert store.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_v3_metrics_are_rebuilt_compact(tmp_path: Path) -> None:
    """v4 keeps one b-tree for metrics: a v3 DB's rows come back the same, from the log."""
    path = tmp_path / "v3.db"
    from portside.store.projections import insert_rows
    from portside.store.schema import migrate

    conn = database_at(path, 3)
    conn.execute("BEGIN")
    recs = [{"type": "step", "step": 0, "loss": 2.5, "grad_norm": "nan", "lr": [0.1]},
            {"type": "metric", "name": "accuracy", "value": 91.5, "step": None},
            {"type": "step", "step": 0, "loss": 2.25}]  # a second rank's record of step 0
    events = [ev.RunRecord(session_id="s", seq=1, ts=1.0, run_id="r", records=recs)]
    insert_rows(conn, "INSERT INTO events (session_id, seq, ts, kind, body) VALUES (?,?,?,?,?)",
                [(e.session_id, e.seq, e.ts, "run.record", ev.encode(e).decode()) for e in events])
    # What a v3 portside derived from that event (written here by hand: the ground truth).
    v3_rows = [("s", "r", 0, "loss", 2.5), ("s", "r", 0, "grad_norm", None),
               ("s", "r", 0, "lr", 0.1), ("s", "r", None, "accuracy", 91.5),
               ("s", "r", 0, "loss", 2.25)]
    conn.executemany("INSERT INTO metrics (session_id, run_id, step, name, value)"
                     " VALUES (?,?,?,?,?)", v3_rows)
    conn.execute("COMMIT")
    assert migrate(conn, path) == SCHEMA_USER_VERSION
    got = conn.execute("SELECT session_id, run_id, step, name, value FROM metrics").fetchall()
    assert sorted(got, key=repr) == sorted(v3_rows, key=repr)
    assert conn.execute("SELECT COUNT(*) FROM sqlite_master WHERE type = 'index'"
                        " AND tbl_name = 'metrics' AND sql IS NOT NULL").fetchone()[0] == 0
    conn.close()


def test_v4_metrics_come_back_the_same_through_v5s_view(tmp_path: Path) -> None:
    """v5 numbers the runs of metric points; a v4 DB's rows read the same from `metrics`
    (now a view), every column people query, and filtered by run the way Datasette does."""
    path = tmp_path / "v4.db"
    from portside.store.schema import migrate

    conn = database_at(path, 4)
    conn.execute("BEGIN")
    events = [
        ev.RunRecord(session_id="s", seq=1, ts=1.0, run_id="r", records=[
            {"type": "step", "step": 7, "loss": 2.5, "lr": [0.1]},
            {"type": "metric", "name": "accuracy", "value": 91.5, "step": None}]),
        ev.RunRecord(session_id="s2", seq=1, ts=1.0, run_id="r", records=[
            {"type": "step", "step": 7, "loss": 3.5}]),  # the same run id in another session
    ]
    conn.executemany("INSERT INTO events (session_id, seq, ts, kind, body) VALUES (?,?,?,?,?)",
                     [(e.session_id, e.seq, e.ts, "run.record", ev.encode(e).decode())
                      for e in events])
    # What a v4 portside derived from those events (by hand: the ground truth).
    v4_rows = [("s", "r", 7, "loss", 2.5, 1, 0), ("s", "r", 7, "lr", 0.1, 1, 0),
               ("s", "r", None, "accuracy", 91.5, 1, 1), ("s2", "r", 7, "loss", 3.5, 1, 0)]
    conn.executemany("INSERT INTO metrics (session_id, run_id, step, name, value, seq, k)"
                     " VALUES (?,?,?,?,?,?,?)", v4_rows)
    conn.execute("COMMIT")
    assert migrate(conn, path) == SCHEMA_USER_VERSION >= 5  # v4 migrates to the current one
    cols = "session_id, run_id, step, name, value, seq, k"
    assert sorted(conn.execute(f"SELECT {cols} FROM metrics").fetchall(), key=repr) == sorted(
        v4_rows, key=repr)
    assert conn.execute("SELECT value FROM metrics WHERE session_id = 's2' AND run_id = 'r'"
                        " AND name = 'loss'").fetchall() == [(3.5,)]
    conn.close()
