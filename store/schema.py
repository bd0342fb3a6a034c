"""Schema and forward migrations, versioned with ``PRAGMA user_version``.

The ``events`` table is the truth; every other table is derived from it in the same transaction
as the event, for fast queries (and for browsing in Datasette).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from portside.core.log.busy_time import HUMAN_S_SQL

if TYPE_CHECKING:  # imported by migrate only: ~0.2 s that an up-to-date file never needs
    import sqlite_utils

SCHEMA_USER_VERSION = 6


class StoreError(RuntimeError):
    """The database cannot be used as asked; the message says why and where."""


def connect(path: str | Path, *, readonly: bool = False) -> sqlite3.Connection:
    """Open a connection with the pragmas every portside connection needs."""
    path = Path(path)
    if readonly:
        if not path.exists():
            raise StoreError(f"{path}: no such database")
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
    conn.execute("PRAGMA busy_timeout = 10000")
    if not readonly:
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if mode.lower() != "wal":
            raise StoreError(f"{path}: could not enable WAL (journal_mode={mode})")
        # FULL: a committed intervention survives power loss too, not only a process crash.
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
    return conn


RUNS_COLUMNS: dict[str, type] = {
    "run_id": str,
    "session_id": str,
    "seq": int,
    "role": str,
    "attempt": int,
    "command": str,
    "target": str,
    "seed_offset": int,
    "started_at": float,
    "finished_at": float,
    "exit_code": int,
    "signal": int,
    "outcome": str,
    "reason": str,
    "wall_s": float,
    "compile_s": float,
    "steady_step_s": float,
    "steps": int,
    "error_type": str,
    "error_message": str,
    "metrics": str,
    "device": str,
}
ALARMS_COLUMNS: dict[str, type] = {
    "alarm_id": str,
    "session_id": str,
    "seq": int,
    "run_id": str,
    "check": str,
    "severity": str,
    "title": str,
    "evidence": str,
    "raised_at": float,
    "acknowledged_at": float,
    "acknowledged_by": str,
    "cleared_at": float,
}
INTERVENTIONS_COLUMNS: dict[str, type] = {
    "intervention_id": str,
    "session_id": str,
    "seq": int,
    "action": str,
    "steering": int,
    "answers": int,
    "target_id": str,
    "attention_started_at": float,
    "decided_at": float,
    "attention_s": float,
    "reviewer": str,
    "note": str,
    "during_replay": int,
}
METRICS_COLUMNS: dict[str, type] = {
    "session_id": str, "run_id": str, "step": int, "name": str, "value": float
}

# One row per session with the study's counts: what `portside sessions` and Datasette show.
# The same rules as core/log/ledger.py (a test holds them equal): a run cut off by a kill of
# portside (reason engine-killed, outcome aborted) is no attempt and no failure.
SESSION_SUMMARY_SQL = f"""
        SELECT s.session_id, s.project, s.target, s.agent, s.mode, s.started_at, s.ended_at,
          s.verdict, s.outcome,
          (SELECT COUNT(*) FROM runs r WHERE r.session_id = s.session_id
             AND r.role = 'candidate' AND COALESCE(r.reason, '') != 'engine-killed') AS attempts,
          (SELECT COUNT(*) FROM runs r WHERE r.session_id = s.session_id
             AND r.role = 'candidate' AND r.outcome LIKE 'failed-%') AS failures,
          (SELECT COUNT(*) FROM runs r WHERE r.session_id = s.session_id
             AND r.role = 'candidate' AND r.outcome = 'failed-silent') AS silent_failures,
          (SELECT COUNT(*) FROM interventions i WHERE i.session_id = s.session_id
             AND i.during_replay = 0) AS interventions,
          (SELECT COUNT(*) FROM interventions i WHERE i.session_id = s.session_id
             AND i.during_replay = 0 AND i.steering = 1) AS steering,
          {HUMAN_S_SQL} AS human_s,
          (SELECT COALESCE(SUM(u.cost_usd), 0) FROM agent_usage u
             WHERE u.session_id = s.session_id) AS token_usd,
          (SELECT COUNT(*) FROM alarms a WHERE a.session_id = s.session_id) AS alarms
        FROM sessions s
        """


def _v1(db: sqlite_utils.Database) -> None:
    # The log itself: clustered on (session_id, seq) with no rowid, so an append touches one
    # b-tree (sqlite-utils cannot say WITHOUT ROWID). Markers are found through the derived
    # tables, so no index on kind is kept here to slow the hot path.
    db.execute(
        "CREATE TABLE events (session_id TEXT NOT NULL, seq INTEGER NOT NULL, ts REAL NOT NULL,"
        " kind TEXT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (session_id, seq)) WITHOUT ROWID"
    )
    db["sessions"].create(
        {
            "session_id": str,
            "project": str,
            "target": str,
            "agent": str,
            "title": str,
            "mode": str,
            "reviewer": str,
            "started_at": float,
            "ended_at": float,
            "verdict": str,
            "outcome": str,
            "reason": str,
            "reference_command": str,
            "candidate_command": str,
        },
        pk="session_id",
    )
    db["runs"].create(
        RUNS_COLUMNS,
        pk="run_id",
    )
    db["runs"].create_index(["session_id", "role", "attempt"])
    db["alarms"].create(
        ALARMS_COLUMNS,
        pk="alarm_id",
    )
    db["alarms"].create_index(["session_id", "seq"])
    db["interventions"].create(
        INTERVENTIONS_COLUMNS,
        pk="intervention_id",
    )
    db["interventions"].create_index(["session_id", "seq"])
    db["metrics"].create(METRICS_COLUMNS)
    db["metrics"].create_index(["run_id", "name", "step"])
    db["agent_usage"].create(
        {
            "session_id": str,
            "seq": int,
            "model": str,
            "input_tokens": int,
            "output_tokens": int,
            "cost_usd": float,
        },
        pk=("session_id", "seq"),
    )
    db.create_view("session_summary", SESSION_SUMMARY_SQL)


def _v2(db: sqlite_utils.Database) -> None:
    # A cache, not truth: the replay index of a session (seq, ts, kind code per event as
    # packed little-endian arrays), so reopening a 1M-event session does not fetch a
    # million rows into Python. Rebuilt or extended from `events` whenever it falls behind
    # (store/replay_source.py); dropping the table loses nothing.
    db["replay_index"].create(
        {
            "session_id": str,
            "upto_seq": int,
            "seqs": bytes,  # int64; NULL when seq == position + 1 (every store session)
            "ts": bytes,  # float64
            "codes": bytes,  # uint8, per portside.core.replay.player.KINDS order when built
            "kinds": str,  # JSON list: the kind order the codes refer to
        },
        pk="session_id",
    )


def _v3(db: sqlite_utils.Database) -> None:
    # Derived rows were keyed by a global id (run_id, alarm_id, intervention_id) with INSERT OR
    # REPLACE: an imported copy of a session, or two sessions whose short run ids collided,
    # took over each other's rows. Every derived table is now keyed by session as well, and
    # all of them are rebuilt from the log, which repairs rows taken over before.
    db.execute("DROP VIEW IF EXISTS session_summary")
    for table in ("runs", "alarms", "interventions", "metrics"):
        db.execute(f"DROP TABLE IF EXISTS {table}")
    db.execute("DELETE FROM sessions")
    db.execute("DELETE FROM agent_usage")
    db["runs"].create(RUNS_COLUMNS, pk=("session_id", "run_id"))
    db["runs"].create_index(["session_id", "role", "attempt"])
    db["alarms"].create(ALARMS_COLUMNS, pk=("session_id", "alarm_id"))
    db["alarms"].create_index(["session_id", "seq"])
    db["interventions"].create(INTERVENTIONS_COLUMNS, pk=("session_id", "intervention_id"))
    db["interventions"].create_index(["session_id", "seq"])
    db["metrics"].create(METRICS_COLUMNS)
    db["metrics"].create_index(["session_id", "run_id", "name", "step"])
    # Not derived from the log: where a session came from. An imported recording is data, and
    # its commands are not run again (`run --resume`) without the user's say-so.
    db["imports"].create(
        {"session_id": str, "source": str, "imported_at": float}, pk="session_id"
    )
    db.create_view("session_summary", SESSION_SUMMARY_SQL)
    from .projections import PROJECTED_KINDS, reproject

    # Metrics (run.record) are rebuilt by v4 in their own shape.
    reproject(db.conn, kinds=tuple(k for k in PROJECTED_KINDS if k != "run.record"))


METRICS_V4 = (
    "CREATE TABLE metrics (session_id TEXT NOT NULL, run_id TEXT NOT NULL, step INTEGER,"
    " name TEXT NOT NULL, value REAL, seq INTEGER NOT NULL, k INTEGER NOT NULL,"
    " PRIMARY KEY (session_id, run_id, name, seq, k)) WITHOUT ROWID"
)


def _v4(db: sqlite_utils.Database) -> None:
    # The replay index kept by the writer (store/index_blocks.py), so a replay opens without
    # scanning the log. Sessions written before have no blocks: their index is still built
    # from `events` (and cached in replay_index) at their first replay.
    from .index_blocks import SCHEMA

    db.execute(SCHEMA)
    # Metrics were a rowid table plus an index holding every row again (~520 bytes a step
    # record of 6 metrics). Now one b-tree, clustered the way they are read (a run's series
    # of one name) and keyed by where the record is in the log: event seq, k-th record of it.
    # Same columns people query (session_id, run_id, step, name, value), plus seq and k.
    # (Rebuilt from the log by v5, in v5's layout.)
    db.execute("DROP TABLE IF EXISTS metrics")
    db.execute(METRICS_V4)


# Metrics, v5: each v4 row spelled out its session and run ids (~30 of its ~57 bytes, 5 rows a
# step record). Points now name their run by a small integer, and ``metrics`` is a view with
# v4's columns over them, so the same queries (and Datasette's table page, filters, charts of
# step against value) read it as before: WHERE session_id/run_id finds the run's key through
# metric_runs' unique index, then the points of that run (and name) by their primary key.
METRICS_V5 = (
    "CREATE TABLE metric_runs (id INTEGER PRIMARY KEY, session_id TEXT NOT NULL,"
    " run_id TEXT NOT NULL, UNIQUE (session_id, run_id))",
    "CREATE INDEX metric_runs_run_id ON metric_runs (run_id)",  # WHERE run_id = ? alone
    "CREATE TABLE metric_points (run INTEGER NOT NULL REFERENCES metric_runs (id),"
    " name TEXT NOT NULL, seq INTEGER NOT NULL, k INTEGER NOT NULL, step INTEGER, value REAL,"
    " PRIMARY KEY (run, name, seq, k)) WITHOUT ROWID",
    "CREATE VIEW metrics AS SELECT r.session_id, r.run_id, p.step, p.name, p.value, p.seq, p.k"
    " FROM metric_points p JOIN metric_runs r ON r.id = p.run",
)


def _v5(db: sqlite_utils.Database) -> None:
    # From here run.output and run.record bodies are stored without the envelope keys their
    # row holds as columns (store/codec.py), which a portside of v4 could not decode: hence
    # the version. Rows written before stay whole and are read as they are (not rewritten).
    from .projections import reproject

    # v4's rows are what v5 derives, in another layout: copied in SQL (seconds for millions,
    # where decoding the log again took minutes). Empty (v4 was applied just now, or no run
    # recorded a metric): rebuilt from the log.
    old = db.execute("SELECT 1 FROM sqlite_master WHERE name = 'metrics' AND type = 'table'"
                     ).fetchone() and db.execute("SELECT 1 FROM metrics LIMIT 1").fetchone()
    db.execute("ALTER TABLE metrics RENAME TO metrics_v4" if old else "DROP TABLE IF EXISTS metrics")
    for sql in METRICS_V5:
        db.execute(sql)
    if old:
        db.execute("INSERT INTO metric_runs (session_id, run_id) SELECT DISTINCT session_id,"
                   " run_id FROM metrics_v4 ORDER BY session_id, run_id")
        db.execute("INSERT INTO metric_points (run, name, seq, k, step, value)"
                   " SELECT r.id, m.name, m.seq, m.k, m.step, m.value FROM metrics_v4 m"
                   " JOIN metric_runs r ON r.session_id = m.session_id AND r.run_id = m.run_id"
                   " ORDER BY r.id, m.name, m.seq, m.k")
        db.execute("DROP TABLE metrics_v4")
    else:
        reproject(db.conn, kinds=("run.record",))


def _v6(db: sqlite_utils.Database) -> None:
    # Human time was the sum of the interventions' spans: an ack open while a verdict was
    # being written counted twice. The view now counts their union (core/log/busy_time.py).
    db.execute("DROP VIEW IF EXISTS session_summary")
    db.create_view("session_summary", SESSION_SUMMARY_SQL)


MIGRATIONS: list[Callable[[sqlite_utils.Database], None]] = [_v1, _v2, _v3, _v4, _v5, _v6]


def migrate(conn: sqlite3.Connection, path: str | Path = "") -> int:
    """Bring the schema up to date; refuse a database from a newer portside."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > len(MIGRATIONS):
        raise StoreError(
            f"{path}: schema version {version} is newer than this portside understands "
            f"({len(MIGRATIONS)}); upgrade portside"
        )
    if version == len(MIGRATIONS):
        return version  # up to date: no Database (it scans entry points for plugins, ~25 ms)
    import sqlite_utils

    db = sqlite_utils.Database(conn)
    for target in range(version, len(MIGRATIONS)):
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Another process opening the same new file (`study status` beside `study run`)
            # may have migrated while this one waited for the write lock: read it again here.
            if conn.execute("PRAGMA user_version").fetchone()[0] > target:
                conn.execute("COMMIT")
                continue
            MIGRATIONS[target](db)
            conn.execute(f"PRAGMA user_version = {target + 1}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return len(MIGRATIONS)
