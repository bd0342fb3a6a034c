"""`portside verify --localize`: a clipping alarm is followed by its localisation, in the JSON
and in the session log (alarm.localized, read back from the SQLite store)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import clean_env, cli

from portside.core.log import events as ev

from ._util import command

pytestmark = pytest.mark.slow


def verify(tmp_path: Path, candidate: str, db: Path) -> dict:
    proc = cli("verify", "--reference", command("--steps 6"), "--candidate", command(candidate),
               "--target", "cpu", "--reference-runs", "1", "--localize", "--json",
               db=db, env=clean_env(), timeout=900, cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_clipping_alarm_is_localized_into_json_and_log(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    out = verify(tmp_path, "--steps 6 --max-norm 0.05", db)
    assert any(a["kind"] == "clipping-changed" for a in out["alarms"])
    assert out["divergence"]["kind"] == "clip"
    assert out["divergence"]["name"] == "encoder.0.weight"
    assert out["localize"]["alarm"] == "clipping-changed"

    from portside.store import Store

    store = Store(db)
    try:
        sid = store.resolve_session(out["session"])
        found = [e for e in store.events(sid) if isinstance(e, ev.AlarmLocalized)]
        alarms = {e.alarm_id: e for e in store.events(sid) if isinstance(e, ev.AlarmRaised)}
        from portside.store.exports import report_md

        report = report_md(store, sid)
    finally:
        store.close()
    assert len(found) == 1
    assert found[0].divergence is not None and found[0].divergence["kind"] == "clip"
    assert alarms[found[0].alarm_id].check == "clipping-changed"
    assert "where it diverged: first divergence: clip encoder.0.weight at step 0" in report


def test_no_trigger_alarm_means_no_localize_run(tmp_path: Path) -> None:
    out = verify(tmp_path, "--steps 6 --threads 1", tmp_path / "db.sqlite")
    assert out["divergence"] is None
    assert "skipped" in out["localize"]
