"""The hook client `portside attach` writes into Claude Code's settings, run as Claude Code runs
it (a process, the hook's JSON on stdin): it blocks PreToolUse (exit 2) when nobody answers or
the token is wrong, and passes portside's answer through when it is right."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

from portside.core.claude_code.attach_settings import CLIENT


def _client(url: str, event: str) -> subprocess.CompletedProcess[str]:
    body = json.dumps({"hook_event_name": event, "tool_name": "Bash",
                       "tool_input": {"command": "touch x"}})
    return subprocess.run([sys.executable, "-I", str(CLIENT), url], input=body, text=True,
                          capture_output=True, timeout=30)


def test_hook_client_blocks_pre_tool_use_when_nobody_answers() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    res = _client(f"http://127.0.0.1:{port}/hook/x", "PreToolUse")
    assert res.returncode == 2 and "portside is not answering" in res.stderr
    assert _client(f"http://127.0.0.1:{port}/hook/x", "PostToolUse").returncode == 0


def test_hook_server_answers_only_its_token() -> None:
    from portside.core.claude_code.attached import _serve

    server = _serve("right-token", lambda body: {"seen": body["hook_event_name"]})
    try:
        port = server.server_address[1]
        wrong = _client(f"http://127.0.0.1:{port}/hook/wrong-token", "PreToolUse")
        assert wrong.returncode == 2 and "403" in wrong.stderr
        right = _client(f"http://127.0.0.1:{port}/hook/right-token", "PreToolUse")
        assert right.returncode == 0 and json.loads(right.stdout) == {"seen": "PreToolUse"}
    finally:
        server.shutdown()
        server.server_close()
