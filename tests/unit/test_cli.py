"""The CLI skeleton: --db before or after the subcommand, $PORTSIDE_DB, sessions/import/show."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from portside.cli.main import main
from portside.core.log import events as ev
from portside.store import Store


@pytest.fixture
def recording(tmp_path: Path) -> Path:
    with Store(tmp_path / "src.db") as s:
        rec = s.recorder
        rec.append(ev.SessionStarted(session_id="20261129-cli1", project="/x/mnist", target="tpu"))
        rec.append(ev.AlarmRaised(session_id="20261129-cli1", alarm_id="a1", check="wrong-hardware",
                                  severity="error", title="ran on CPU:0, target tpu"))
        rec.append(ev.RunOutput(session_id="20261129-cli1", run_id="r", lines=["\x1b[2Jspoof"]))
        rec.flush()
        out = tmp_path / "rec.jsonl"
        runner = CliRunner()
        res = runner.invoke(main, ["--db", str(tmp_path / "src.db"), "export", "20261129-cli1",
                                   "-o", str(out)])
        assert res.exit_code == 0, res.output
    return out


def test_import_sessions_show_with_db_in_both_places(tmp_path: Path, recording: Path) -> None:
    db = tmp_path / "dst.db"
    runner = CliRunner()
    res = runner.invoke(main, ["import", str(recording), "--db", str(db)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(main, ["--db", str(db), "sessions"])
    assert "20261129-cli1" in res.output and "mnist" in res.output
    res = runner.invoke(main, ["show", "20261129-cli1", "--db", str(db)])
    assert res.exit_code == 0
    assert "ALARM error wrong-hardware" in res.output
    assert "\x1b" not in res.output  # the run's escape sequence is not replayed to the terminal


def test_portside_db_env(tmp_path: Path, recording: Path) -> None:
    db = tmp_path / "env.db"
    runner = CliRunner(env={"PORTSIDE_DB": str(db)})
    assert runner.invoke(main, ["import", str(recording)]).exit_code == 0
    assert db.exists()
    assert "20261129-cli1" in runner.invoke(main, ["sessions"]).output


def test_bad_recording_says_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    res = CliRunner().invoke(main, ["import", str(bad), "--db", str(tmp_path / "d.db")])
    assert res.exit_code == 2
    assert f"{bad}:1: header is not JSON" in res.output


def test_unknown_session_is_clear(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["show", "nope", "--db", str(tmp_path / "d.db")])
    assert res.exit_code == 2 and "no session matches 'nope'" in res.output


def test_not_a_database(tmp_path: Path) -> None:
    bad = tmp_path / "x.db"
    bad.write_text("plain text " * 200)
    res = CliRunner().invoke(main, ["sessions", "--db", str(bad)])
    assert res.exit_code == 2 and "cannot open as a portside database" in res.output
