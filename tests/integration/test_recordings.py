"""The shipped recordings import and replay headless to the end, and show what they are for."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import cli

from portside.store import Store
from portside.store.jsonl import import_file, read_recording

REPO = Path(__file__).resolve().parents[2]
RECORDINGS = REPO / "sessions" / "recordings"
EXPECTED = {
    "demo": {"clipping-changed", "agent-claim-contradicted"},
    "recompilation-storm": {"recompilation"},
    "silent-cpu-default": {"wrong-hardware"},
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recording_imports_and_replays(tmp_path: Path, name: str) -> None:
    path = RECORDINGS / f"{name}.jsonl"
    events = read_recording(path)
    with Store(tmp_path / "r.db") as store:
        sid = import_file(store, path)
        checks = {a["check"] for a in store.alarms(sid)}
        assert EXPECTED[name] <= checks
        assert store.session(sid)["verdict"] == "fail"
    res = cli("replay", str(path), "--headless", "--speed", "0")
    assert res.returncode == 0, res.stderr[-2000:]
    lines = res.stdout.strip().splitlines()
    assert "session ended" in lines[-1]
    assert len(lines) >= len(events) * 0.9  # every event printed (a few may span no line)


def test_the_hint_after_a_replay_names_commands_that_run(tmp_path: Path) -> None:
    # Issue 41.11: the quit hint said `portside export ID report`, which exits 2.
    import re

    from portside.cli.exports import after_replay_hint

    db = tmp_path / "r.db"
    with Store(db) as store:
        sid = import_file(store, RECORDINGS / "demo.jsonl")
    commands = re.findall(r"`portside ([^`]+)`", after_replay_hint(sid))
    assert len(commands) == 2
    for cmd in commands:
        res = cli(*cmd.split(), db=db, timeout=120)
        assert res.returncode == 0, (cmd, res.stderr[-1000:])
        assert res.stdout.strip()
