"""A reviewer's decision on a study session, carried to the worker whose engine waits for it.

The submitting process (`study run`) listens on 127.0.0.1 only (a free port), as `portside
attach` serves its hooks: a random token guards it, written with the port to a file only its
owner reads, beside the study's database (``work/review-<study>.json``); a request without the
token is refused. Each request is one JSON line, answered with one JSON line. The head passes a
decision to the phase's worker on the worker's stdin (core/study/worker.py applies it to its
engine's gate); the intervention then comes back like every event, through the one writer.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import socketserver
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

# An edit's decisions, the claim's verdict, and the steering that answers no card.
ACTIONS = ("approve", "reject", "edit", "verdict", "message", "pause", "resume")
CARD_ACTIONS = ("approve", "reject", "edit")  # these answer an edit waiting now
MAX_LINE = 64 * 1024


class RelayError(RuntimeError):
    """The decision could not be passed on; the message says why."""


def relay_file(work_root: Path, study: str) -> Path:
    return work_root / f"review-{study}.json"


def check_request(req: Any) -> dict[str, Any]:
    """A decision as the worker takes it (the head checks it first, the worker again)."""
    if not isinstance(req, dict):
        raise RelayError("a request is a JSON object")
    if req.get("action") not in ACTIONS:
        raise RelayError(f"action {req.get('action')!r}: expected one of {', '.join(ACTIONS)}")
    for key in ("session", "target", "note", "reviewer", "after"):
        if not isinstance(req.get(key, ""), str):
            raise RelayError(f"{key}: expected a string")
    if not isinstance(req.get("shown_at", 0.0), int | float):
        raise RelayError("shown_at: expected a time (epoch seconds)")
    if req["action"] == "verdict" and req.get("verdict") not in ("pass", "fail"):
        raise RelayError(f"verdict {req.get('verdict')!r}: expected pass or fail")
    if req["action"] == "edit" and "after" not in req:
        raise RelayError("an edit needs its text (after)")
    if req["action"] == "message" and not req.get("note", "").strip():
        raise RelayError("an empty message is not sent")
    return req


class ReviewRelay:
    """The head's end: ``decide(request)`` passes a checked request on (RelayError: why not)."""

    def __init__(self, path: Path, decide: Callable[[dict[str, Any]], None]) -> None:
        self.path = path
        token = secrets.token_urlsafe(24)

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                line = self.rfile.readline(MAX_LINE)
                try:
                    req = json.loads(line or b"null")
                    if not isinstance(req, dict) or not secrets.compare_digest(
                            str(req.pop("token", "")), token):
                        raise RelayError("wrong token")
                    decide(check_request(req))
                    reply: dict[str, Any] = {"ok": True}
                except (ValueError, RelayError) as exc:
                    reply = {"error": str(exc)}
                self.wfile.write(json.dumps(reply).encode() + b"\n")

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server(("127.0.0.1", 0), Handler)
        port = self._server.server_address[1]
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"port": port, "token": token, "pid": os.getpid()}, f)
        threading.Thread(target=self._server.serve_forever, name="study-review-relay",
                         daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def send_decision(path: Path, request: dict[str, Any], timeout: float = 10.0) -> None:
    """The reviewer's end: the request to the `study run` that wrote ``path``."""
    try:
        where = json.loads(path.read_text())
    except (OSError, ValueError):
        raise RelayError(f"no `study run` takes decisions for this study now ({path} not "
                         f"there): run `portside study run` for it") from None
    try:
        with socket.create_connection(("127.0.0.1", int(where["port"])), timeout=timeout) as s:
            s.sendall(json.dumps({**request, "token": where["token"]}).encode() + b"\n")
            reply = json.loads(s.makefile("rb").readline(MAX_LINE) or b"{}")
    except (OSError, ValueError, KeyError) as exc:
        raise RelayError(f"the `study run` of {path} did not answer: {exc}") from None
    if not reply.get("ok"):
        raise RelayError(str(reply.get("error") or "refused"))
