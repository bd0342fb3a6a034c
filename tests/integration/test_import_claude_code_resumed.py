"""Transcripts the real Claude Code CLI writes (the one claude-agent-sdk bundles, against a
loopback Messages API) when a session is resumed (`--resume`: appended to the same file) and
forked (`--resume --fork-session`: a new file that repeats the earlier messages with their
uuids): each file imports whole, each message once. Its own out-of-order lines (attachments
dated a few ms before the prompt they follow) are not mistaken for a spliced file."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cli_run import cli as portside
from test_verify_imported_claude_code import _bundled_cli

from portside.core.log import events as ev
from portside.store import Store

pytestmark = pytest.mark.slow


def _claude(cli: str, project: Path, config: Path, steps: list[Any], *args: str) -> str:
    from loopback_api import LoopbackAPI

    with LoopbackAPI(steps) as api:
        env = {**os.environ, **api.claude_code_env(config)}
        run = subprocess.run([cli, *args, "--output-format", "stream-json", "--verbose",
                              "--model", "claude-haiku-4-5", "--allowedTools", "Read,Bash,Glob"],
                             cwd=project, env=env, capture_output=True, text=True, timeout=180)
        assert run.returncode == 0, run.stderr[-3000:]
        assert not api.errors, api.errors
    return str([json.loads(x) for x in run.stdout.splitlines()
                if '"type":"result"' in x][-1]["session_id"])


def test_resumed_and_forked_transcripts_import_each_message_once(tmp_path: Path) -> None:
    cli = _bundled_cli()
    from loopback_api import text, tool

    project = tmp_path / "proj"
    project.mkdir()
    (project / "a.txt").write_text("hello\n")
    config = tmp_path / "claude-config"
    first = _claude(cli, project, config, [
        [text("first turn"), tool("toolu_b1", "Bash", {"command": "echo one",
                                                        "description": "one"}),
         tool("toolu_r1", "Read", {"file_path": f"{project}/a.txt"})],
        [text("first done")]], "-p", "first")
    assert _claude(cli, project, config, [[text("second done")]], "-p", "second",
                   "--resume", first) == first
    fork = _claude(cli, project, config, [[text("forked done")]], "-p", "third", "--resume",
                   first, "--fork-session")
    assert fork != first
    files = {p.stem: p for p in config.glob("projects/*/*.jsonl")}
    assert set(files) == {first, fork}
    # The fork's file repeats the first session's messages, uuids and all: another file.
    uuids = {k: [json.loads(x).get("uuid") for x in p.read_text().splitlines()]
             for k, p in files.items()}
    assert set(uuids[first]) & set(uuids[fork]) - {None}

    db = tmp_path / "p.db"
    spans: dict[str, float] = {}
    want = {first: ["first turn", "first done", "second done"],
            fork: ["first turn", "first done", "second done", "forked done"]}
    for sid, path in files.items():
        res = portside("import", "--claude-code", str(path), "--as", f"s-{sid[:8]}", db=db,
                       timeout=120)
        assert res.returncode == 0, res.stderr
        assert "duplicate" not in res.stderr  # within one file, Claude Code repeats nothing
        with Store(db) as store:
            events = list(store.events(f"s-{sid[:8]}"))
        assert [e.text for e in events if isinstance(e, ev.AgentText)] == want[sid]
        assert sorted(e.call_id for e in events if isinstance(e, ev.AgentToolResult)) == [
            "toolu_b1", "toolu_r1"]  # in the order they finished
        assert all(a.ts <= b.ts for a, b in zip(events, events[1:], strict=False))
        said = {e.text: e.ts for e in events if isinstance(e, ev.AgentText)}
        spans[sid] = said["second done"] - said["first turn"]
    # The fork's copy of the history keeps its original times (its file starts with lines
    # dated at the fork: by file order the copied history would be squeezed into an instant).
    assert spans[fork] == pytest.approx(spans[first], abs=0.002) and spans[first] > 0.5
