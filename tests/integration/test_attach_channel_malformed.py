"""attach's hook channel (issue 38.5) given malformed calls on its real socket: each is refused
and logged through ``on_refused``, none is answered, nothing is printed on portside's terminal,
and the channel still answers a good call afterwards (the real hook client)."""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from portside.core.claude_code.attach_channel import HookChannel
from portside.core.claude_code.attach_hooks import CLIENT


def _frame(data: bytes) -> bytes:
    return struct.pack(">Q", len(data)) + data


HEADS = {
    "non-ASCII mac": json.dumps({"nonce": "a", "mac": "\u00e9" * 64}).encode(),
    "mac not a string": json.dumps({"nonce": "a", "mac": ["x"]}).encode(),
    "head not an object": b"[1]",
    "head deeply nested": b"[" * 4000,
    "head not UTF-8": b"\xff\xfe",
}


@pytest.mark.parametrize("what", sorted(HEADS))
def test_malformed_call_is_refused_and_logged(what: str, capfd: pytest.CaptureFixture[str]
                                              ) -> None:
    refused: list[str] = []
    seen: list[dict[str, object]] = []

    def answer(body: dict[str, object]) -> dict[str, object]:
        seen.append(body)
        return {"ok": 1}

    channel = HookChannel(answer, refused.append)
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(10)
            s.connect(str(channel.folder / "hook.sock"))
            s.recv(8 + 32)  # the server's nonce
            # closed, unanswered (reset when it stopped reading before our body)
            with contextlib.suppress(ConnectionResetError, BrokenPipeError):
                s.sendall(_frame(HEADS[what]) + _frame(b'{"hook_event_name": "PreToolUse"}'))
                assert s.recv(1 << 16) == b""
        good = subprocess.run([sys.executable, "-I", str(CLIENT), str(channel.folder)],
                              input='{"hook_event_name": "PreToolUse"}', text=True,
                              capture_output=True, timeout=30)
        assert good.returncode == 0 and json.loads(good.stdout) == {"ok": 1}, good.stderr
    finally:
        channel.close()
    assert len(seen) == 1  # only the good call
    assert len(refused) == 1 and "refused" in refused[0], refused
    assert "Traceback" not in capfd.readouterr().err


def test_a_client_gone_before_its_answer_is_no_refusal() -> None:
    """A signed call whose client leaves before the answer (Claude Code killed the hook) is
    not logged as a forged or malformed one."""
    import threading

    from portside.core.claude_code import hook_client as wire

    refused: list[str] = []
    answered = threading.Event()

    def answer(body: dict[str, object]) -> dict[str, object]:
        answered.wait(10)  # until the client has gone
        return {"ok": 1}

    channel = HookChannel(answer, refused.append)
    try:
        key = (channel.folder / "key").read_bytes()
        raw = b'{"hook_event_name": "PreToolUse"}'
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(10)
            s.connect(str(channel.folder / "hook.sock"))
            server_nonce = wire._recv(s, 64)
            mac = wire._mac(key, b"request", server_nonce, b"c1", raw)
            s.sendall(_frame(json.dumps({"nonce": "c1", "mac": mac}).encode()) + _frame(raw))
        answered.set()
        good = subprocess.run([sys.executable, "-I", str(CLIENT), str(channel.folder)],
                              input=raw.decode(), text=True, capture_output=True, timeout=30)
        assert good.returncode == 0, good.stderr  # served after it, so the first is done
    finally:
        channel.close()
    assert refused == []


def test_a_long_tmpdir_still_gets_a_channel(monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
    """A TMPDIR too long for a socket's path (sun_path) raised at bind and left the key's
    folder behind; the channel goes to /tmp instead."""
    import tempfile

    long = tmp_path / ("d" * 100)
    long.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(long))
    channel = HookChannel(lambda body: {"ok": 1})
    try:
        assert channel.folder.parent == Path("/tmp")
        good = subprocess.run([sys.executable, "-I", str(CLIENT), str(channel.folder)],
                              input='{"hook_event_name": "PreToolUse"}', text=True,
                              capture_output=True, timeout=30)
        assert good.returncode == 0 and json.loads(good.stdout) == {"ok": 1}, good.stderr
    finally:
        channel.close()
    assert not channel.folder.exists() and list(long.iterdir()) == []
