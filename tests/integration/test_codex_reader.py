"""Codex's app-server reader (issue 38.11): whatever the server sends on its stdout, the turn
ends and the session ends classified, with the reason named in the log.

The server here is a real process on a real pipe, read by portside's real reader inside a real
session (engine, reference run, workspace): a small stdlib app-server that answers the
handshake and starts a turn, then does one bad thing (a 70 MiB line, a line that is not JSON,
non-UTF-8 bytes, exiting mid-turn) and otherwise stays alive with its stdout open, as a wedged
Codex would. Before the fix the 70 MiB line killed the reader task and the turn never ended."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from doubles import MemorySink

from portside.core.codex.live import MAX_LINE, CodexAgent
from portside.core.log import events as ev
from portside.core.session.engine import SessionConfig, SessionEngine

SERVER = r'''
import json, sys, time
BAD = sys.argv[1]
out = sys.stdout.buffer
def send(obj):
    out.write(json.dumps({"jsonrpc": "2.0", **obj}).encode() + b"\n"); out.flush()
for raw in sys.stdin.buffer:
    msg = json.loads(raw)
    m, i = msg.get("method"), msg.get("id")
    if m == "initialize":
        send({"id": i, "result": {}})
    elif m == "thread/start":
        send({"id": i, "result": {"thread": {"id": "thr-1", "path": ""}}})
    elif m == "turn/start":
        send({"id": i, "result": {"turn": {"id": "turn-1"}}})
        if BAD == "huge":  # one agentMessage line of 70 MiB
            head = b'{"jsonrpc": "2.0", "method": "item/completed", "params": {"item": '
            out.write(head + b'{"type": "agentMessage", "text": "' + b"x" * (70 << 20)
                      + b'"}}}\n')
        elif BAD == "not-json":
            out.write(b"Traceback (most recent call last): oops\n")
        elif BAD == "not-utf8":
            out.write(b'{"method": "item/completed", "params": {"\xff\xfe": 1}}\n')
        elif BAD == "params":
            out.write(b'{"method": "item/completed", "params": [1, 2]}\n')
        elif BAD == "exit":
            sys.exit(3)
        out.flush()
        time.sleep(3600)  # stdout open, no turn/completed: only the reader can end the turn
'''

REASONS = {
    "huge": f"a line over {MAX_LINE // 2**20} MiB",
    "not-json": "line 4 is not JSON",
    "not-utf8": "line 4 is not JSON",
    "params": "is not an object",
    "exit": "codex app-server exited (status 3)",
}


@pytest.mark.parametrize("bad", sorted(REASONS))
def test_a_broken_app_server_ends_the_turn_classified(tmp_path: Path, bad: str) -> None:
    server = tmp_path / "fake-codex"
    server.write_text(f"#!{sys.executable}\n{SERVER}")
    server.chmod(0o755)
    server_args = tmp_path / "codex"  # the agent runs `<cli> app-server`: pass `bad` on
    server_args.write_text(f"#!/bin/sh\nexec {server} {bad}\n")
    server_args.chmod(0o755)
    project = tmp_path / "proj"
    project.mkdir()
    (project / "train.py").write_text("print('loss 1.0')\n")
    sink = MemorySink()
    config = SessionConfig(project=project, target="cpu",
                           reference_command=f"{sys.executable} train.py", reference_runs=1,
                           agent=CodexAgent(cli_path=str(server_args)), policy="auto",
                           mode="headless", isolate=True, sandbox=False,
                           workdir=tmp_path / "work", stall_s=60)
    engine = SessionEngine(config, sink)

    async def main() -> object:
        return await asyncio.wait_for(engine.run(), 120)

    result = asyncio.run(main())  # before the fix: TimeoutError (the turn never ended)
    assert result.verdict == "fail"
    assert result.reason.startswith("agent API error: ") and REASONS[bad] in result.reason, \
        result.reason
    errors = [e.detail for e in sink.events
              if isinstance(e, ev.SessionState) and e.state == "agent-error"]
    assert errors and REASONS[bad] in errors[-1], errors
    ended = [e for e in sink.events if isinstance(e, ev.SessionEnded)]
    assert len(ended) == 1 and ended[0].reason == result.reason
    # Nothing of the 70 MiB line reached the log.
    assert not any(isinstance(e, ev.AgentText) and len(e.text) > 1000 for e in sink.events)
