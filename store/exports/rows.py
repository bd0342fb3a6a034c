"""Export rows, read from the store: interventions (from the log itself), alarms, runs.

Rows come from the derived tables, written in the same transaction as their events; secrets
never reach the store (the runner scrubs them), so nothing here filters them."""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from portside.core.checks.evidence import RunEnded, read
from portside.core.log import events as ev
from portside.core.log.ledger import attention_s
from portside.store.queries import Store

SCHEMA_DIR = Path(__file__).resolve().parents[1] / "schemas"
INTERVENTION_COLUMNS = (
    "session",
    "seq",
    "kind",
    "steering",
    "answers",
    "attention_started_at",
    "decided_at",
    "attention_seconds",
    "reviewer",
    "note",
    "verdict",
)
ALARM_COLUMNS = (
    "session",
    "seq",
    "alarm_id",
    "check",
    "severity",
    "title",
    "run_id",
    "raised_at",
    "acknowledged_at",
    "acknowledged_by",
    "cleared_at",
    "cleared_reason",
    "evidence",
)
RUN_COLUMNS = (
    "session",
    "seq",
    "run_id",
    "role",
    "attempt",
    "target",
    "outcome",
    "exit_code",
    "reason",
    "started_at",
    "finished_at",
    "wall_s",
    "compile_s",
    "steady_step_s",
    "steps",
    "compute_usd",
    "error_type",
    "error_message",
)


def iso(ts: float | None) -> str | None:
    """ISO 8601 UTC with milliseconds and a Z, or None."""
    if ts is None or not math.isfinite(ts):
        return None
    return (
        dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )


# --- rows -----------------------------------------------------------------------------------


def intervention_rows(store: Store, session_ids: Sequence[str]) -> list[dict[str, Any]]:
    return list(iter_intervention_rows(store, session_ids))


def iter_intervention_rows(store: Store, session_ids: Sequence[str]) -> Iterator[dict[str, Any]]:
    """Every intervention, read from the log itself (the reviewer's verdict is a field of its
    intervention, which the derived table does not carry)."""
    for sid in session_ids:
        for e in store.events(sid, kinds=["intervention"]):
            if not isinstance(e, ev.Intervention):
                continue
            yield (
                {
                    "session": sid,
                    "seq": e.seq,
                    "kind": e.action,
                    "steering": bool(e.steering),
                    "answers": e.answers,
                    "attention_started_at": iso(e.attention_started_at),
                    "decided_at": iso(e.decided_at),
                    "attention_seconds": round(attention_s(e), 3),
                    "reviewer": e.reviewer or "",
                    "note": e.note or "",
                    "verdict": e.verdict or "",
                }
            )


def alarm_rows(store: Store, session_ids: Sequence[str]) -> list[dict[str, Any]]:
    return list(iter_alarm_rows(store, session_ids))


def iter_alarm_rows(store: Store, session_ids: Sequence[str]) -> Iterator[dict[str, Any]]:
    for sid in session_ids:
        # Why an alarm was closed is the log's (alarm.cleared), read through the one fold.
        alarms = store.ledger(sid).alarms
        for r in store.iter_table("alarms", sid, "seq"):
            entry = alarms.get(r["alarm_id"])
            yield (
                {
                    "session": sid,
                    "seq": r["seq"],
                    "alarm_id": r["alarm_id"],
                    "check": r["check"],
                    "severity": r["severity"],
                    "title": r["title"],
                    "run_id": r["run_id"] or "",
                    "raised_at": iso(r["raised_at"]),
                    "acknowledged_at": iso(r["acknowledged_at"]),
                    "acknowledged_by": r["acknowledged_by"] or "",
                    "cleared_at": iso(r["cleared_at"]),
                    "cleared_reason": entry.cleared_reason if entry is not None else "",
                    "evidence": r["evidence"] or {},
                }
            )


def run_rows(store: Store, session_ids: Sequence[str]) -> list[dict[str, Any]]:
    return list(iter_run_rows(store, session_ids))


def iter_run_rows(store: Store, session_ids: Sequence[str]) -> Iterator[dict[str, Any]]:
    for sid in session_ids:
        ledger = store.ledger(sid)
        for r in store.iter_table("runs", sid, "seq"):
            entry = ledger.runs.get(r["run_id"])
            yield (
                {
                    "session": sid,
                    "seq": r["seq"],
                    "run_id": r["run_id"],
                    "role": r["role"],
                    "attempt": r["attempt"],
                    "target": r["target"],
                    "outcome": r["outcome"],
                    "exit_code": r["exit_code"],
                    "reason": r["reason"] or "",
                    "started_at": iso(r["started_at"]),
                    "finished_at": iso(r["finished_at"]),
                    "wall_s": r["wall_s"],
                    "compile_s": r["compile_s"],
                    "steady_step_s": r["steady_step_s"],
                    "steps": r["steps"],
                    "compute_usd": entry.compute_usd if entry is not None else None,
                    "error_type": r["error_type"] or "",
                    "error_message": r["error_message"] or "",
                }
            )

def crash_cause(alarm: dict[str, Any]) -> tuple[str, str]:
    """(cause, the line that shows it) of a crash alarm row; a crash recorded before causes
    existed is "unknown"."""
    evidence = alarm.get("evidence") or {}
    if isinstance(evidence, str):  # stored as JSON text
        try:
            evidence = json.loads(evidence)
        except ValueError:
            evidence = {}
    typed = read("crashed", evidence)
    assert isinstance(typed, RunEnded)
    return (typed.cause if isinstance(typed.cause, str) and typed.cause else "unknown",
            typed.cause_line if isinstance(typed.cause_line, str) else "")
