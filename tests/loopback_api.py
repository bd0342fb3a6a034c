"""A loopback Anthropic Messages API for tests: real HTTP on 127.0.0.1, SSE streaming in the
API's wire format, scripted replies, and a record of every request it received.

Real clients (the anthropic SDK, the Claude Code CLI) are pointed at it with
``ANTHROPIC_BASE_URL=server.url``. Each reply is a list of content blocks (``text(...)``,
``tool(...)``) or a callable ``step(request_body) -> blocks`` so a test can answer what the
client actually sent (absolute paths, a rejection's reason). Requests that are not the main
conversation (Claude Code's title / topic side calls, which carry no tools) are answered with a
short text and do not consume the script; ``side_reply`` changes that text.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

Block = dict[str, Any]
Step = list[Block] | Callable[[dict[str, Any]], list[Block]]

MODEL = "claude-haiku-4-5"
KEY = "sk-ant-api03-LOOPBACK-SECRET-0123456789abcdef"  # what no recording may hold
_IDS = itertools.count(1)


def ws_of(body: dict[str, Any]) -> str:
    """The workspace Claude Code runs in, from the environment it describes to the model."""
    m = re.search(r"Primary working directory: ([^\\\"]+?)(?:\\n|\")", json.dumps(body))
    assert m, "no working directory in the request"
    return m.group(1).strip()


def text(t: str) -> Block:
    return {"type": "text", "text": t}


def tool(call_id: str, name: str, input: Any = None, raw_json: str | None = None) -> Block:
    return {"type": "tool_use", "id": call_id, "name": name, "input": input or {}, "raw": raw_json}


def _pieces(s: str, n: int) -> list[str]:
    return [s[i : i + n] for i in range(0, len(s), n)] or [""]


def sse_events(
    blocks: list[Block],
    *,
    model: str = MODEL,
    stop_reason: str | None = None,
    input_tokens: int = 100,
    output_tokens: int = 20,
    cache_read: int = 0,
    cache_write: int = 0,
    overloaded_after: int | None = None,
) -> list[tuple[str, dict[str, Any]]]:
    """The (event name, data) pairs of one streamed Messages API reply with these blocks. With
    ``overloaded_after=N`` the stream breaks off after N events with an overloaded error."""
    if stop_reason is None:
        stop_reason = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": {
            "id": f"msg_{next(_IDS):04d}", "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": 1,
                      "cache_creation_input_tokens": cache_write,
                      "cache_read_input_tokens": cache_read}}}),
        ("ping", {"type": "ping"}),
    ]
    for i, b in enumerate(blocks):
        if b["type"] == "text":
            start: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in _pieces(b["text"], 7)]
        else:
            start = {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}
            raw = b["raw"] if b.get("raw") is not None else json.dumps(b["input"])
            deltas = [{"type": "input_json_delta", "partial_json": ""}] + [
                {"type": "input_json_delta", "partial_json": p} for p in _pieces(raw, 5)]
        events.append(("content_block_start",
                       {"type": "content_block_start", "index": i, "content_block": start}))
        events += [("content_block_delta", {"type": "content_block_delta", "index": i, "delta": d})
                   for d in deltas]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(("message_delta", {
        "type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": None},
        "usage": {"output_tokens": output_tokens}}))
    events.append(("message_stop", {"type": "message_stop"}))
    if overloaded_after is not None:
        events = events[:overloaded_after] + [
            ("error", {"type": "error", "error": {"type": "overloaded_error",
                                                  "message": "Overloaded"}})]
    return events


def sse(blocks: list[Block], **kw: Any) -> bytes:
    """A whole SSE body for these blocks (see :func:`sse_events`)."""
    return "".join(f"event: {n}\ndata: {json.dumps(d)}\n\n"
                   for n, d in sse_events(blocks, **kw)).encode()


def message_json(blocks: list[Block], model: str = MODEL) -> dict[str, Any]:
    """A non-streamed reply."""
    content = [{k: v for k, v in b.items() if k != "raw"} for b in blocks]
    stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    return {"id": f"msg_{next(_IDS):04d}", "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5,
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}


def last_user_texts(body: dict[str, Any]) -> str:
    """Every text the last user message of a request carries (tool results included)."""
    msgs = body.get("messages") or []
    if not msgs:
        return ""
    out: list[str] = []

    def walk(c: Any) -> None:
        if isinstance(c, str):
            out.append(c)
        elif isinstance(c, list):
            for x in c:
                walk(x)
        elif isinstance(c, dict):
            if "text" in c:
                out.append(str(c["text"]))
            if "content" in c:
                walk(c["content"])

    walk(msgs[-1].get("content"))
    return "\n".join(out)


class LoopbackAPI:
    """``with LoopbackAPI(steps) as api:`` serves ``api.url`` until the block ends."""

    def __init__(self, steps: list[Step] | None = None, *, usage: dict[str, int] | None = None,
                 side_reply: str = "Porting") -> None:
        self.steps: list[Step] = list(steps or [])
        self.usage = usage or {}
        self.side_reply = side_reply
        self.requests: list[dict[str, Any]] = []  # every body, side calls included
        self.conversation: list[dict[str, Any]] = []  # the bodies that consumed a step
        self.headers: list[dict[str, str]] = []
        self.paths: list[str] = []
        self.errors: list[str] = []  # what the server could not answer (shown on failure)
        self.lock = threading.Lock()
        self.got_request = threading.Condition(self.lock)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---- script

    def add(self, *steps: Step) -> None:
        with self.lock:
            self.steps.extend(steps)

    def _next(self, body: dict[str, Any]) -> tuple[list[Block] | None, bool]:
        with self.lock:
            main = bool(body.get("tools"))
            if main:
                self.conversation.append(body)
                if not self.steps:
                    self.errors.append("a conversation request after the script ran out")
                    return [text("(script exhausted)")], True
                step = self.steps.pop(0)
            else:
                step = [text(self.side_reply)]
        blocks = step(body) if callable(step) else step
        return blocks, main

    # ---- server

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def claude_code_env(self, config: Path) -> dict[str, str]:
        """The variables that point the Claude Code CLI at this server alone: its key, its URL,
        a config folder of its own, and no traffic of the CLI's own (telemetry, updates)."""
        return {"ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": self.url,
                "CLAUDE_CONFIG_DIR": str(config), "DISABLE_TELEMETRY": "1",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"}

    def __enter__(self) -> LoopbackAPI:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:  # quiet
                pass

            def _send_json(self, status: int, obj: Any) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.send_header("request-id", "req_loopback")
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                with api.lock:
                    api.paths.append("GET " + self.path)
                self._send_json(404, {"type": "error", "error": {
                    "type": "not_found_error", "message": f"no {self.path} here"}})

            def do_HEAD(self) -> None:
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def do_POST(self) -> None:
                n = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(n)
                path = self.path.split("?")[0]
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"_raw": raw.decode("utf-8", "replace")}
                with api.lock:
                    api.paths.append("POST " + self.path)
                    api.headers.append({k.lower(): v for k, v in self.headers.items()})
                    api.requests.append(body)
                    api.got_request.notify_all()
                if path.endswith("/count_tokens"):
                    self._send_json(200, {"input_tokens": 100})
                    return
                if not path.endswith("/v1/messages"):
                    self._send_json(404, {"type": "error", "error": {
                        "type": "not_found_error", "message": f"no {path} here"}})
                    return
                try:
                    blocks, main = api._next(body)
                except Exception as exc:  # a broken step: a 500 the test will see
                    with api.lock:
                        api.errors.append(f"step raised {exc!r}")
                    self._send_json(500, {"type": "error", "error": {
                        "type": "api_error", "message": str(exc)}})
                    return
                model = body.get("model") or MODEL
                usage = api.usage if main else {}
                if not body.get("stream"):
                    self._send_json(200, message_json(blocks or [], model))
                    return
                data = sse(blocks or [], model=model, **usage)
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("content-length", str(len(data)))
                self.send_header("request-id", "req_loopback")
                self.end_headers()
                self.wfile.write(data)
                self.wfile.flush()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def wait_for(self, pred: Callable[[], bool], timeout: float = 30.0) -> bool:
        """Wait until ``pred()`` (checked on each request) holds."""
        with self.got_request:
            return self.got_request.wait_for(pred, timeout)
