"""The private channel between `portside attach` and its hook client (hook_client.py).

A folder only this user can enter (mkdtemp: 0700) holds a 0600 key and a Unix socket. The
folder's name goes into the settings and the hook's argv; the key never does. A call is
answered only when the peer is this user (SO_PEERCRED) and its HMAC covers this connection's
fresh server nonce, so a forged call (no key) or a replayed one (an old nonce) is refused and
reported through ``on_refused``. Answers are signed back (the client's nonce included): the
client trusts no other server, and a socket someone else binds after portside died is refused
by the client before it is even asked (the folder is not theirs, nor their key).

Wire (both ways, each frame an 8-byte big-endian length then bytes): server → nonce; client →
``{"nonce", "mac"}`` and the hook's JSON; server → ``{"status", "mac"}`` and the answer.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import socketserver
import struct
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from portside.core.claude_code import hook_client as wire

#: How long a connected client may take to send its call (it sends at once).
REQUEST_S = 30.0
#: sun_path is 108 bytes on Linux, the terminating NUL included.
SUN_PATH_MAX = 107


class HookChannel:
    """Serves ``answer(hook JSON) -> answer JSON`` to the hook client until closed."""

    def __init__(self, answer: Callable[[dict[str, Any]], dict[str, Any]],
                 on_refused: Callable[[str], None] = lambda why: None) -> None:
        base = tempfile.gettempdir()
        if len(f"{base}/portside-attach-12345678/{wire.SOCK}") > SUN_PATH_MAX:
            base = "/tmp"  # a socket's path is capped (sun_path); /tmp is sticky too
        self.folder = Path(tempfile.mkdtemp(prefix="portside-attach-", dir=base))  # 0700
        self._key = secrets.token_bytes(32)
        fd = os.open(self.folder / wire.KEY, os.O_WRONLY | os.O_CREAT | os.O_EXCL
                     | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(self._key)
        key, refuse = self._key, on_refused

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                conn: socket.socket = self.request
                conn.settimeout(REQUEST_S)
                try:
                    _pid, uid, _gid = struct.unpack("3i", conn.getsockopt(
                        socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
                    if uid != os.geteuid():
                        refuse(f"a hook call from uid {uid} (not this user's) was refused")
                        return
                    server_nonce = secrets.token_hex(16).encode()
                    wire._send(conn, server_nonce)
                    head = json.loads(wire._recv(conn, 4096))
                    raw = wire._recv(conn)
                    nonce = str(head.get("nonce", ""))[:64].encode()
                    # bytes: compare_digest raises on a non-ASCII str (a peer's choice)
                    if not secrets.compare_digest(str(head.get("mac", "")).encode(), wire._mac(
                            key, b"request", server_nonce, nonce, raw).encode()):
                        refuse("a hook call with a wrong signature (forged, or replayed "
                               "from another connection) was refused")
                        return
                    conn.settimeout(None)  # the reviewer may take long; the client waits
                    status, out = "ok", b""
                    try:
                        body = json.loads(raw or b"{}")
                        if not isinstance(body, dict):
                            raise ValueError("not an object")
                        out = json.dumps(answer(body)).encode()
                    except Exception as exc:  # no answer → the client blocks (PreToolUse)
                        status, out = "error", f"{type(exc).__name__}: {exc}".encode()
                    # a client gone before its answer (killed by Claude Code) is no refusal
                    with contextlib.suppress(OSError):
                        wire._send(conn, json.dumps({"status": status, "mac": wire._mac(
                            key, b"answer", server_nonce, nonce, status.encode(), out)}).encode())
                        wire._send(conn, out)
                except Exception as exc:  # any peer input: refused and logged, no traceback
                    refuse(f"a malformed hook call was refused ({type(exc).__name__})")

        try:
            self._server = socketserver.ThreadingUnixStreamServer(
                str(self.folder / wire.SOCK), Handler)
        except BaseException:
            shutil.rmtree(self.folder, ignore_errors=True)  # no key left behind
            raise
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True,
                         name="attach-hooks").start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        with contextlib.suppress(OSError):
            shutil.rmtree(self.folder)
