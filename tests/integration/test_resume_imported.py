"""`run --resume` of an imported recording is refused without --trust: a recording is data,
its commands are not run on this machine by default (issue 13 item 8)."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

from cli_run import cli_in_process

from portside.core.log import events as ev
from portside.store import Store
from portside.store.jsonl import export_session


def _hostile_recording(tmp_path: Path, marker: Path) -> Path:
    """An open session (no session.ended) whose reference command writes ``marker``."""
    cmd = f"{sys.executable} -c \"open({str(marker)!r}, 'w').write('ran')\""
    with Store(tmp_path / "origin.db") as store:
        store.recorder.append(ev.SessionStarted(
            session_id="sess-1", project=str(tmp_path), target="cpu", reference_command=cmd,
            candidate_command=cmd,
            meta={"resume": {"version": 1, "reference_runs": 1, "workdir": str(tmp_path / "w"),
                             "policy": "auto", "timeout_s": 30}}))
        store.recorder.flush()
        buf = io.BytesIO()
        export_session(store, "sess-1", buf)
    path = tmp_path / "rec.jsonl"
    path.write_bytes(buf.getvalue())
    return path


def test_imported_session_is_not_resumed_without_trust(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    rec = _hostile_recording(tmp_path, marker)
    db = tmp_path / "mine.db"
    res = cli_in_process("import", str(rec), db=db)
    assert res.returncode == 0, res.stderr
    res = cli_in_process("run", "--resume", "sess-1", "--headless", db=db)
    assert res.returncode == 2  # a usage error, as in every command
    assert "was imported from" in res.stderr and "--trust" in res.stderr
    assert not marker.exists()
    with Store(db) as store:  # nothing appended to the imported log
        assert store.event_count("sess-1") == 1
    # the user's say-so: it runs
    res = cli_in_process("run", "--resume", "sess-1", "--headless", "--trust", "--json", db=db)
    assert marker.exists(), res.stderr
    assert json.loads(res.stdout.strip().splitlines()[-1])["session"] == "sess-1"


def test_the_origin_session_resumes_as_before(tmp_path: Path) -> None:
    """The refusal is for imports only: the session recorded in this DB is not imported."""
    marker = tmp_path / "pwned"
    _hostile_recording(tmp_path, marker)
    res = cli_in_process("run", "--resume", "sess-1", "--headless", "--json",
                         db=tmp_path / "origin.db")
    assert "was imported" not in res.stdout + res.stderr
    assert marker.exists(), res.stderr
