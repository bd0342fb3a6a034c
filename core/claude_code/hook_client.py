"""Claude Code's command hook for `portside attach` (stdlib only; run by Claude Code, never
imported by portside): sends the hook's JSON (stdin) to portside over the Unix socket in the
channel folder named by argv[1] and prints portside's answer for Claude Code to read.

The folder name is no secret (it is in the settings and in ``ps``); what makes the channel
private is the folder itself: it must be ours and closed to everyone else (0700), as must the
key in it (0600). Both ends prove they hold that key, bound to nonces from both sides, so the
client believes only the portside that made the folder (SO_PEERCRED: the same user; an HMAC
over the answer) and a captured call cannot be replayed. The wire format is mirrored in
core/claude_code/attach_channel.py.

Fails closed: Claude Code lets a tool run when a command hook crashes, times out or exits with
anything but 2. So every failure to get an authenticated answer on PreToolUse ends here in
exit 2, which blocks the tool and hands stderr to the model. Other events (PostToolUse, Stop,
SessionStart/End) pass quietly when portside is gone.
"""

import hashlib
import hmac
import json
import os
import secrets
import socket
import stat
import struct
import sys

#: Below the hook's own timeout in the settings: this client says no before Claude Code would
#: kill it (a killed hook lets the tool run).
WAIT_S = 23 * 3600
MAX_FRAME = 64 << 20
KEY, SOCK = "key", "hook.sock"


def _mac(key: bytes, *parts: bytes) -> str:
    return hmac.new(key, b"\0".join(parts), hashlib.sha256).hexdigest()


def _private(st: os.stat_result, what: str) -> None:
    if st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise PermissionError(f"{what} is not private to this user (uid {st.st_uid}, "
                              f"mode {stat.S_IMODE(st.st_mode):o})")


def _key(folder: str) -> bytes:
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode):
        raise PermissionError(f"{folder} is not a folder")
    _private(st, folder)
    fd = os.open(os.path.join(folder, KEY), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise PermissionError("the channel key is not a file")
        _private(st, "the channel key")
        return os.read(fd, 4096)
    finally:
        os.close(fd)


def _send(s: socket.socket, data: bytes) -> None:
    s.sendall(struct.pack(">Q", len(data)) + data)


def _recv(s: socket.socket, limit: int = MAX_FRAME) -> bytes:
    def exactly(n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = s.recv(min(n - len(buf), 1 << 20))
            if not chunk:
                raise ConnectionError("portside closed the channel without an answer")
            buf += chunk
        return buf

    (n,) = struct.unpack(">Q", exactly(8))
    if n > limit:
        raise ValueError("frame too large")
    return exactly(n)


def ask(folder: str, raw: bytes) -> bytes:
    """portside's answer to ``raw``, authenticated; raises on anything else."""
    key = _key(folder)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(WAIT_S)
        s.connect(os.path.join(folder, SOCK))
        _pid, uid, _gid = struct.unpack("3i", s.getsockopt(
            socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
        if uid != os.geteuid():
            raise PermissionError(f"the hook socket is served by uid {uid}, not this user")
        server_nonce = _recv(s, 64)
        nonce = secrets.token_hex(16).encode()
        _send(s, json.dumps({"nonce": nonce.decode(),
                             "mac": _mac(key, b"request", server_nonce, nonce, raw)}).encode())
        _send(s, raw)
        head = json.loads(_recv(s, 4096))
        body = _recv(s)
    if not hmac.compare_digest(str(head.get("mac", "")), _mac(
            key, b"answer", server_nonce, nonce, str(head.get("status", "")).encode(), body)):
        raise PermissionError("the answer is not signed by this attach's portside")
    if head.get("status") != "ok":
        raise RuntimeError(body.decode(errors="replace")[:500])
    json.loads(body or b"{}")  # an answer that is not JSON is no answer
    return body


def main() -> int:
    folder = sys.argv[1] if len(sys.argv) > 1 else ""
    raw = sys.stdin.buffer.read()
    try:
        event = json.loads(raw or b"{}").get("hook_event_name", "")
    except (ValueError, AttributeError):
        event = ""
    try:
        body = ask(folder, raw)
    except Exception as exc:  # any failure: no answer
        if event in ("PreToolUse", "PermissionRequest", ""):
            sys.stderr.write(f"portside is not answering ({type(exc).__name__}: {exc}); "
                             "the tool call is blocked until its review is back\n")
            return 2
        return 0
    sys.stdout.buffer.write(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
