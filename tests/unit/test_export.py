"""Exports: interventions CSV/JSON (schema-validated), alarms, runs, the Markdown report."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from check_runs import clipping_port
from click.testing import CliRunner

from portside.cli.main import main
from portside.core.log import events as ev
from portside.store import Store
from portside.store.exports import SCHEMA_DIR, report_md
from portside.store.jsonl import import_events

SID = "20260301-export-0001"
T0 = 1_772_000_000.0  # 2026-02-25T06:13:20Z
GOLDEN = Path(__file__).parent / "golden" / "report.md"
TPU = {"device_kind": "TPU", "device_name": "TPU v5e", "device_count": 4}


def fixture_events(sid: str = SID) -> list[ev.Event]:
    """A small migration with fixed timestamps: a reference, two candidates (one silent
    failure, one pass), an alarm with evidence, three interventions (one during replay)."""
    x = "" if sid == SID else "-" + sid[-4:]  # ids are unique across sessions
    raw: list[tuple[float, ev.Event]] = [
        (0, ev.SessionStarted(session_id=sid, project="/work/mnist", target="tpu:v5e",
                              agent="claude:claude-sonnet-4-5", reviewer="ana")),
        (1, ev.RunStarted(session_id=sid, run_id=f"ref-1{x}", role="reference", attempt=1,
                          command="python train.py", target="cpu")),
        (61, ev.RunFinished(session_id=sid, run_id=f"ref-1{x}", exit_code=0, outcome="passed",
                            wall_s=60.0, compile_s=0.0, steady_step_s=0.05, steps=1000,
                            device={"device_kind": "CPU", "device_count": 1})),
        (70, ev.EditProposed(session_id=sid, edit_id=f"e1{x}", path="train.py", before="a", after="b")),
        (82.5, ev.Intervention(session_id=sid, intervention_id=f"i1{x}", action="approve",
                               steering=False, attention_started_at=T0 + 70,
                               decided_at=T0 + 82.5, reviewer="ana", answers=4)),
        (90, ev.RunStarted(session_id=sid, run_id=f"cand-1{x}", role="candidate", attempt=1,
                           command="python train.py", target="tpu:v5e")),
        (990, ev.RunFinished(session_id=sid, run_id=f"cand-1{x}", exit_code=0, outcome="failed-silent",
                             wall_s=900.0, compile_s=48.2, steady_step_s=0.021, steps=1000,
                             device=TPU)),
        (991, ev.AlarmRaised(session_id=sid, alarm_id=f"al-1{x}", check="clipping-changed",
                             severity="error", title="max_norm changed 1.0 → 0.05",
                             evidence={"ref_max_norm": 1.0, "cand_max_norm": 0.05,
                                       "clipped_share": [0.03, 1.0]}, run_id=f"cand-1{x}")),
        (1000, ev.AgentUsage(session_id=sid, model="claude-sonnet-4-5", input_tokens=120_000,
                             output_tokens=8000, cost_usd=0.48)),
        (1060, ev.Intervention(session_id=sid, intervention_id=f"i2{x}", action="reject",
                               steering=True, attention_started_at=T0 + 991,
                               decided_at=T0 + 1060, reviewer="ana", answers=8,
                               note="keep max_norm=1.0, clip after the all-reduce")),
        (1100, ev.RunStarted(session_id=sid, run_id=f"cand-2{x}", role="candidate", attempt=2,
                             command="python train.py", target="tpu:v5e")),
        (1900, ev.RunFinished(session_id=sid, run_id=f"cand-2{x}", exit_code=0, outcome="passed",
                              wall_s=800.0, compile_s=47.9, steady_step_s=0.0205, steps=1000,
                              device=TPU)),
        (1910, ev.AgentClaimed(session_id=sid, summary="ported")),
        (1920, ev.SessionEnded(session_id=sid, verdict="pass", outcome="passed",
                               reason="no error alarm")),
        (5000, ev.Intervention(session_id=sid, intervention_id=f"i3{x}", action="review-note",
                               steering=False, attention_started_at=T0 + 4990,
                               decided_at=T0 + 5000, reviewer="bo", note="clipping | good catch",
                               during_replay=True)),
    ]
    out = []
    for i, (dt, e) in enumerate(raw, start=1):
        e.seq, e.ts = i, T0 + dt
        out.append(e)
    return out


def report_events() -> list[ev.Event]:
    """fixture_events with the candidate's alarms as the real checks raise them: its max_norm
    1.0 ported as 0.05 (tests/check_runs.py), the clipping alarm and the drift it causes."""
    out: list[ev.Event] = []
    for e in fixture_events():
        if not isinstance(e, ev.AlarmRaised):
            out.append(e)
            continue
        real = [a for a in clipping_port() if a.kind in ("clipping-changed", "numeric-drift")]
        for i, a in enumerate(real, start=1):
            raised = a.raised(SID, e.run_id)
            raised.alarm_id, raised.ts = f"al-{i}", e.ts
            out.append(raised)
    for i, e in enumerate(out, start=1):
        e.seq = i
    return out


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "x.db"
    store = Store(path)
    import_events(store, fixture_events())
    store.close()
    return path


def _run(db: Path, *args: str) -> str:
    res = CliRunner().invoke(main, ["--db", str(db), "export", *args])
    assert res.exit_code == 0, res.output
    return res.stdout


def test_interventions_csv(db: Path) -> None:
    rows = list(csv.DictReader(io.StringIO(_run(db, SID, "--what", "interventions",
                                                "--format", "csv"))))
    assert len(rows) == 3
    assert [r["kind"] for r in rows] == ["approve", "reject", "review-note"]
    assert [float(r["attention_seconds"]) for r in rows] == [12.5, 69.0, 10.0]
    assert rows[0]["attention_started_at"] == "2026-02-25T06:14:30.000Z"
    assert rows[0]["decided_at"] == "2026-02-25T06:14:42.500Z"
    assert rows[1]["steering"] == "true" and rows[1]["answers"] == "8"
    assert rows[2]["note"] == "clipping | good catch" and rows[2]["answers"] == ""
    assert list(rows[0]) == ["session", "seq", "kind", "steering", "answers",
                             "attention_started_at", "decided_at", "attention_seconds",
                             "reviewer", "note", "verdict"]


def _validate(instance: Any, schema: dict[str, Any]) -> None:
    """jsonschema when the venv has it; else the subset of draft 2020-12 the schema uses."""
    try:
        import jsonschema
    except ImportError:
        _mini_validate(instance, schema, "$")
    else:
        jsonschema.validate(instance, schema)


_TYPES = {"array": list, "object": dict, "string": str, "boolean": bool, "null": type(None),
          "integer": int, "number": (int, float)}


def _mini_validate(value: Any, schema: dict[str, Any], where: str) -> None:
    types = schema.get("type")
    if types is not None:
        types = [types] if isinstance(types, str) else types
        ok = any(isinstance(value, _TYPES[t]) and not (t in ("integer", "number")
                 and isinstance(value, bool)) for t in types)
        assert ok, f"{where}: {value!r} is not {types}"
    if "enum" in schema:
        assert value in schema["enum"], f"{where}: {value!r} not in enum"
    if isinstance(value, int | float) and not isinstance(value, bool) and "minimum" in schema:
        assert value >= schema["minimum"], f"{where}: below minimum"
    if isinstance(value, str):
        assert len(value) >= schema.get("minLength", 0), f"{where}: too short"
        if "pattern" in schema:
            assert re.search(schema["pattern"], value), f"{where}: does not match pattern"
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            _mini_validate(item, schema["items"], f"{where}[{i}]")
    if isinstance(value, dict):
        for key in schema.get("required", []):
            assert key in value, f"{where}: missing {key}"
        props = schema.get("properties", {})
        if schema.get("additionalProperties") is False:
            extra = set(value) - set(props)
            assert not extra, f"{where}: unexpected {extra}"
        for key, sub in props.items():
            if key in value:
                _mini_validate(value[key], sub, f"{where}.{key}")


def test_interventions_json_validates_against_the_schema(db: Path) -> None:
    schema = json.loads((SCHEMA_DIR / "interventions.schema.json").read_text())
    data = json.loads(_run(db, SID, "--what", "interventions", "--format", "json"))
    assert len(data) == 3
    _validate(data, schema)
    data[0]["attention_seconds"] = -1
    with pytest.raises(Exception, match="minimum|-1"):
        _validate(data, schema)


def test_alarms_runs_and_all(db: Path, tmp_path: Path) -> None:
    store = Store(db)
    import_events(store, fixture_events("20260302-export-0002"))
    store.close()
    alarms = list(csv.DictReader(io.StringIO(_run(db, "--all", "--what", "alarms"))))
    assert [a["session"] for a in alarms] == [SID, "20260302-export-0002"]
    assert json.loads(alarms[0]["evidence"])["cand_max_norm"] == 0.05
    runs = [json.loads(line) for line in _run(db, SID, "--what", "runs", "--format", "jsonl")
            .splitlines()]
    assert [r["outcome"] for r in runs] == ["passed", "failed-silent", "passed"]
    assert runs[1]["compute_usd"] == pytest.approx(900 / 3600 * 1.20 * 4)
    out = tmp_path / "i.md"
    res = CliRunner().invoke(main, ["--db", str(db), "export", "--all", "--what",
                                    "interventions", "--format", "md", "-o", str(out)])
    assert res.exit_code == 0 and "wrote 6 interventions" in res.output
    assert out.read_text().count("\n| 2026") == 6


def test_export_usage_errors(db: Path) -> None:
    for args, message in [
        ([SID, "--what", "events", "--format", "csv"], "JSONL recording only"),
        (["--all", "--what", "report"], "one session at a time"),
        ([SID, "--all"], "not both"),
        ([], "missing SESSION"),
    ]:
        res = CliRunner().invoke(main, ["--db", str(db), "export", *args])
        assert res.exit_code != 0 and message in res.output, (args, res.output)


def test_an_export_never_writes_over_the_database(db: Path, tmp_path: Path) -> None:
    """`-o` naming the database (or its WAL, or a link to it) truncated it to 0 bytes
    before this check: the session log gone, then a 'malformed' traceback."""
    import hashlib
    import os
    import sqlite3

    def digest() -> str:
        return hashlib.sha256(db.read_bytes()).hexdigest()

    link = tmp_path / "link.jsonl"
    os.symlink(db, link)
    before = digest()
    for out, what in [(db, "events"), (db, "interventions"), (link, "report"),
                      (Path(f"{db}-wal"), "alarms"), (tmp_path / "." / db.name, "runs")]:
        res = CliRunner().invoke(main, ["--db", str(db), "export", SID, "--what", what,
                                        "-o", str(out)])
        assert res.exit_code != 0 and "that is the database" in res.output, (out, res.output)
        assert digest() == before, out
    assert not Path(f"{db}-wal").exists() or Path(f"{db}-wal").stat().st_size == 0
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM events").fetchone()[0] > 0
    # another file is written as ever
    _run(db, SID, "-o", str(tmp_path / "out.jsonl"))
    assert (tmp_path / "out.jsonl").stat().st_size > 0


def test_events_jsonl_unchanged(db: Path) -> None:
    lines = _run(db, SID).splitlines()
    assert json.loads(lines[0])["format"] == "portside-recording" and len(lines) == 16


def test_report_golden(tmp_path: Path) -> None:
    db = tmp_path / "report.db"
    with Store(db) as store:
        import_events(store, report_events())
    store = Store(db)
    text = report_md(store, SID)
    store.close()
    assert _run(db, SID, "--what", "report") == text
    if not GOLDEN.exists():
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(text)
        pytest.fail(f"wrote {GOLDEN}: review it and run again (delete it to regenerate)")
    assert text == GOLDEN.read_text()


def test_no_secret_in_any_export(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-ant-api03-THIS-IS-NOT-A-REAL-KEY-0123456789"
    monkeypatch.setenv("ANTHROPIC_API_KEY", secret)
    outputs = [_run(db, SID)]
    for what in ("interventions", "alarms", "runs"):
        for fmt in ("csv", "json", "jsonl", "md"):
            outputs.append(_run(db, SID, "--what", what, "--format", fmt))
    outputs.append(_run(db, SID, "--what", "report"))
    res = CliRunner().invoke(main, ["--db", str(db), "stats", "--format", "json"])
    outputs.append(res.stdout)
    assert all(secret not in out for out in outputs)
