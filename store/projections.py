"""Derived rows for each event, written in the same transaction as the event itself."""

from __future__ import annotations

import json
import math
import sqlite3
from collections import defaultdict
from itertools import chain
from typing import Any

from portside.core.log import events as ev
from portside.core.log.ledger import alarm_refresh

from . import index_blocks
from .codec import ROW_COLUMNS, decode_row, stored_body

_METRIC_KEYS = ("loss", "grad_norm", "max_norm", "step_s", "compiles", "compile_s")


_num = ev.record_number


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


class Batch:
    """Collects the rows of many events, then writes each table with one executemany."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int, float, str, str]] = []
        self.inserts: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
        self.updates: list[tuple[str, tuple[Any, ...]]] = []
        # Metric points by (session, run): numbered in write(), see schema v5.
        self.points: dict[tuple[str, str], list[tuple[Any, ...]]] = {}

    def add(self, event: ev.Event, body: bytes) -> None:
        self.add_row(event_row(event, body), event if has_projection(event) else None)

    def add_row(self, row: tuple[str, int, float, str, str], event: ev.Event | None) -> None:
        """``event`` only when it has derived rows (see :func:`has_projection`)."""
        self.events.append(row)
        if event is not None:
            self.project(event)

    def project(self, event: ev.Event) -> None:
        _HANDLERS[type(event)](self, event)

    def write(self, conn: sqlite3.Connection) -> None:
        insert_rows(
            conn,
            "INSERT INTO events (session_id, seq, ts, kind, body) VALUES (?, ?, ?, ?, ?)",
            self.events,
        )
        index_blocks.append(conn, self.events)
        for sql, rows in self.inserts.items():
            insert_rows(conn, sql, rows)
        for sql, params in self.updates:
            conn.execute(sql, params)
        for (sid, run), rows in self.points.items():
            conn.execute(_METRIC_RUN, (sid, run))
            (number,) = conn.execute(_RUN_NUMBER, (sid, run)).fetchone()
            insert_rows(conn, _METRIC_POINT, [(number, *row) for row in rows])


# Rows per INSERT statement, largest first: a batch is split into these sizes, so each table
# needs at most seven prepared statements (the sqlite3 module caches them by SQL text).
_CHUNKS = (4096, 1024, 256, 64, 16, 4, 1)


def insert_rows(conn: sqlite3.Connection, sql: str, rows: list[tuple[Any, ...]]) -> None:
    """``executemany(sql, rows)`` with many rows per statement.

    The sqlite3 module releases the GIL around every statement step. With one step per row, a
    busy Python thread (a producer appending events) makes the writer wait for the GIL's switch
    interval (5 ms) on every row; with thousands of rows per step the writer binds in bulk and
    SQLite inserts them while Python runs elsewhere.
    """
    if len(rows) < 4:
        conn.executemany(sql, rows)
        return
    head, _, group = sql.rpartition(" VALUES ")
    ncols = len(rows[0])
    limit = conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
    i, n = 0, len(rows)
    for k in _CHUNKS:
        if k * ncols > limit:
            continue
        count = (n - i) // k
        if not count:
            continue
        stmt = f"{head} VALUES {','.join([group] * k)}" if k > 1 else sql
        end = i + count * k
        # Parameters flattened by C iterators alone: no bytecode runs in the writer to be
        # preempted by the producer mid-batch.
        chunks = map(rows.__getitem__, map(slice, range(i, end, k), range(i + k, end + k, k)))
        conn.executemany(stmt, map(tuple, map(chain.from_iterable, chunks)))
        i = end


def event_row(event: ev.Event, body: bytes) -> tuple[str, int, float, str, str]:
    """The ``events`` row of an event and its canonical ``body`` (kept slim: store/codec.py)."""
    return (event.session_id, event.seq, event.ts, _TAGS[type(event)],
            stored_body(event, body).decode())


def has_projection(event: ev.Event) -> bool:
    return type(event) in _HANDLERS


def _session_started(b: Batch, e: ev.SessionStarted) -> None:
    b.inserts[
        "INSERT OR REPLACE INTO sessions (session_id, project, target, agent, title, mode, reviewer,"
        " started_at, reference_command, candidate_command) VALUES (?,?,?,?,?,?,?,?,?,?)"
    ].append(
        (
            e.session_id,
            e.project,
            e.target,
            e.agent,
            e.title,
            e.mode,
            e.reviewer,
            e.ts,
            e.reference_command,
            e.candidate_command,
        )
    )


def _session_ended(b: Batch, e: ev.SessionEnded) -> None:
    b.updates.append(
        (
            "UPDATE sessions SET ended_at=?, verdict=?, outcome=?, reason=? WHERE session_id=?",
            (e.ts, e.verdict, e.outcome, e.reason, e.session_id),
        )
    )


def _run_started(b: Batch, e: ev.RunStarted) -> None:
    b.inserts[
        "INSERT OR REPLACE INTO runs (run_id, session_id, seq, role, attempt, command, target,"
        " seed_offset, started_at, outcome) VALUES (?,?,?,?,?,?,?,?,?,'running')"
    ].append(
        (e.run_id, e.session_id, e.seq, e.role, e.attempt, e.command, e.target, e.seed_offset, e.ts)
    )


def _run_finished(b: Batch, e: ev.RunFinished) -> None:
    b.updates.append(
        (
            "UPDATE runs SET finished_at=?, exit_code=?, signal=?, outcome=?, reason=?, wall_s=?,"
            " compile_s=?, steady_step_s=?, steps=?, error_type=?, error_message=?, metrics=?,"
            " device=? WHERE session_id=? AND run_id=?",
            (
                e.ts,
                e.exit_code,
                e.signal,
                e.outcome,
                e.reason,
                e.wall_s,
                e.compile_s,
                e.steady_step_s,
                e.steps,
                e.error_type,
                e.error_message,
                _json(e.metrics),
                _json(e.device),
                e.session_id,
                e.run_id,
            ),
        )
    )


def _step(value: Any) -> int | None:
    # Records come from the run (or a recording): only an int SQLite can hold is a step.
    if isinstance(value, int) and not isinstance(value, bool) and ev.INT64_MIN <= value <= ev.INT64_MAX:
        return value
    return None


_METRIC_RUN = "INSERT OR IGNORE INTO metric_runs (session_id, run_id) VALUES (?,?)"
_RUN_NUMBER = "SELECT id FROM metric_runs WHERE session_id = ? AND run_id = ?"
_METRIC_POINT = ("INSERT OR REPLACE INTO metric_points (run, name, seq, k, step, value)"
                 " VALUES (?,?,?,?,?,?)")


def _run_record(b: Batch, e: ev.RunRecord) -> None:
    # Keyed by the run's number and the record's place in the log (seq, k): see schema v5.
    rows = b.points.setdefault((e.session_id, e.run_id), [])
    seq = e.seq
    for k, rec in enumerate(e.records):
        kind = rec.get("type")
        if kind == "step":
            step = _step(rec.get("step"))
            for key in _METRIC_KEYS:
                value = _num(rec.get(key))
                if value is not None:
                    rows.append((key, seq, k, step, value))
            lrs = rec.get("lr")
            if isinstance(lrs, list) and lrs:
                value = _num(lrs[0])
                if value is not None:
                    rows.append(("lr", seq, k, step, value))
        elif kind == "metric":
            value = _num(rec.get("value"))
            if value is not None and isinstance(rec.get("name"), str):
                rows.append((rec["name"], seq, k, _step(rec.get("step")), value))


def _alarm_raised(b: Batch, e: ev.AlarmRaised) -> None:
    b.inserts[
        "INSERT OR REPLACE INTO alarms (alarm_id, session_id, seq, run_id, \"check\", severity,"
        " title, evidence, raised_at) VALUES (?,?,?,?,?,?,?,?,?)"
    ].append(
        (
            e.alarm_id,
            e.session_id,
            e.seq,
            e.run_id,
            e.check,
            e.severity,
            e.title,
            _json(e.evidence),
            e.ts,
        )
    )


def _alarm_updated(b: Batch, e: ev.AlarmUpdated) -> None:
    new = alarm_refresh(e)  # the ledger's rule, so the rows say what the screen says
    b.updates.append((
        "UPDATE alarms SET title=?, evidence=? WHERE session_id=? AND alarm_id=?",
        (new["title"], _json(new["evidence"]), e.session_id, e.alarm_id),
    ))


def _alarm_acknowledged(b: Batch, e: ev.AlarmAcknowledged) -> None:
    b.updates.append(
        (
            "UPDATE alarms SET acknowledged_at=?, acknowledged_by=? WHERE session_id=? AND alarm_id=?",
            (e.ts, e.by, e.session_id, e.alarm_id),
        )
    )


def _alarm_cleared(b: Batch, e: ev.AlarmCleared) -> None:
    b.updates.append((
        "UPDATE alarms SET cleared_at=? WHERE session_id=? AND alarm_id=?",
        (e.ts, e.session_id, e.alarm_id),
    ))


def _intervention(b: Batch, e: ev.Intervention) -> None:
    attention = max(0.0, e.decided_at - e.attention_started_at)
    if not math.isfinite(attention):
        attention = 0.0
    b.inserts[
        "INSERT OR REPLACE INTO interventions (intervention_id, session_id, seq, action, steering,"
        " answers, target_id, attention_started_at, decided_at, attention_s, reviewer, note,"
        " during_replay) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)"
    ].append(
        (
            e.intervention_id,
            e.session_id,
            e.seq,
            e.action,
            int(e.steering),
            e.answers,
            e.target_id,
            e.attention_started_at,
            e.decided_at,
            attention,
            e.reviewer,
            e.note,
            int(e.during_replay),
        )
    )


def _usage(b: Batch, e: ev.AgentUsage) -> None:
    b.inserts[
        "INSERT INTO agent_usage (session_id, seq, model, input_tokens, output_tokens, cost_usd)"
        " VALUES (?,?,?,?,?,?)"
    ].append((e.session_id, e.seq, e.model, e.input_tokens, e.output_tokens, e.cost_usd))


_HANDLERS: dict[type, Any] = {
    ev.SessionStarted: _session_started,
    ev.SessionEnded: _session_ended,
    ev.RunStarted: _run_started,
    ev.RunFinished: _run_finished,
    ev.RunRecord: _run_record,
    ev.AlarmRaised: _alarm_raised,
    ev.AlarmUpdated: _alarm_updated,
    ev.AlarmAcknowledged: _alarm_acknowledged,
    ev.AlarmCleared: _alarm_cleared,
    ev.Intervention: _intervention,
    ev.AgentUsage: _usage,
}

_TAGS: dict[type, str] = {cls: tag for tag, cls in ev.EVENT_TYPES.items()}
PROJECTED_KINDS: tuple[str, ...] = tuple(_TAGS[cls] for cls in _HANDLERS)


def reproject(conn: sqlite3.Connection, chunk: int = 5000,
              kinds: tuple[str, ...] = PROJECTED_KINDS) -> int:
    """Rebuild the derived rows of ``kinds`` from the log (a migration; the caller holds the
    transaction). An event that no longer decodes is left out of the derived tables, never out
    of the log."""
    marks = ",".join("?" * len(kinds))
    cur = conn.execute(
        f"SELECT {ROW_COLUMNS} FROM events WHERE kind IN ({marks}) ORDER BY session_id, seq",
        kinds,
    )
    n = 0
    while rows := cur.fetchmany(chunk):
        batch = Batch()
        for row in rows:
            try:
                batch.project(decode_row(*row))
            except ev.EventError:
                continue
            n += 1
        batch.write(conn)
    return n
