"""The hook client `portside attach` writes into Claude Code's settings, run as Claude Code runs
it (a process, the hook's JSON on stdin): it blocks PreToolUse (exit 2) when nobody answers or
the channel's key is not portside's, and passes portside's answer through when it is."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile

from portside.core.claude_code.attach_hooks import CLIENT


def _client(folder: str, event: str) -> subprocess.CompletedProcess[str]:
    body = json.dumps({"hook_event_name": event, "tool_name": "Bash",
                       "tool_input": {"command": "touch x"}})
    return subprocess.run([sys.executable, "-I", str(CLIENT), folder], input=body, text=True,
                          capture_output=True, timeout=30)


def test_hook_client_blocks_pre_tool_use_when_nobody_answers() -> None:
    with tempfile.TemporaryDirectory() as folder:  # private, but no key and no socket
        res = _client(folder, "PreToolUse")
        assert res.returncode == 2 and "portside is not answering" in res.stderr
        assert _client(folder, "PostToolUse").returncode == 0


def test_hook_server_answers_only_its_key() -> None:
    from portside.core.claude_code.attach_channel import HookChannel

    refused: list[str] = []
    channel = HookChannel(lambda body: {"seen": body["hook_event_name"]}, refused.append)
    try:
        right = _client(str(channel.folder), "PreToolUse")
        assert right.returncode == 0 and json.loads(right.stdout) == {"seen": "PreToolUse"}
        (channel.folder / "key").write_bytes(b"not portside's key")  # the client signs with it
        wrong = _client(str(channel.folder), "PreToolUse")
        assert wrong.returncode == 2 and "portside is not answering" in wrong.stderr
        assert refused and "wrong signature" in refused[0]
    finally:
        channel.close()
