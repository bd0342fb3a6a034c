"""A loopback OpenAI Responses API for tests: real HTTP on 127.0.0.1, ``POST /v1/responses``
streamed as SSE in the API's wire format (what the Codex CLI reads), scripted replies, and a
record of every request.

A reply is a list of output items (``message(...)``, ``patch(...)``, ``shell(...)``) or a
callable ``step(request_body) -> items``, so a test can answer what Codex actually sent (a
rejection, a hook's reason). Codex is pointed at it by a ``CODEX_HOME/config.toml`` provider
(:func:`codex_home`).
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

Item = dict[str, Any]
Step = list[Item] | Callable[[dict[str, Any]], list[Item]]
_IDS = itertools.count(1)
MODEL = "gpt-5.5"  # a slug Codex knows: it offers the freeform apply_patch tool


def message(text: str) -> Item:
    return {"type": "message", "role": "assistant", "id": f"msg_{next(_IDS)}",
            "status": "completed", "content": [{"type": "output_text", "text": text,
                                                "annotations": []}]}


def patch(body: str, call_id: str | None = None) -> Item:
    """An ``apply_patch`` call: ``body`` is the text between Begin and End Patch."""
    return {"type": "custom_tool_call", "id": f"ctc_{next(_IDS)}", "status": "completed",
            "call_id": call_id or f"call_{next(_IDS)}", "name": "apply_patch",
            "input": f"*** Begin Patch\n{body.rstrip(chr(10))}\n*** End Patch\n"}


def shell(cmd: str, call_id: str | None = None) -> Item:
    return {"type": "function_call", "id": f"fc_{next(_IDS)}", "status": "completed",
            "call_id": call_id or f"call_{next(_IDS)}", "name": "exec_command",
            "arguments": json.dumps({"cmd": cmd})}


def request_text(body: dict[str, Any]) -> str:
    """Everything a request carries as input (messages and tool outputs), as JSON text."""
    return json.dumps(body.get("input", []))


def codex_home(home: Path, url: str, key_var: str = "LOOPBACK_OPENAI_KEY") -> Path:
    """A CODEX_HOME whose provider is this server, with everything that would reach the
    network off (see ../shared/notes/codex-and-attach.md)."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(f"""model_provider = "loopback"
check_for_update_on_startup = false

[model_providers.loopback]
name = "loopback"
base_url = "{url}/v1"
wire_api = "responses"
env_key = "{key_var}"
request_max_retries = 0
stream_max_retries = 0

[analytics]
enabled = false

[feedback]
enabled = false

[features]
plugins = false
remote_plugin = false
apps = false

[agents]
enabled = false
""")
    return home


def _sse(items: list[Item], usage: dict[str, int]) -> bytes:
    rid = f"resp_{next(_IDS)}"
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": {"id": rid, "status": "in_progress",
                                                  "output": []}}]
    for i, item in enumerate(items):
        events.append({"type": "response.output_item.added", "output_index": i,
                       "item": {**item, "status": "in_progress"}})
        if item["type"] == "message":
            t = item["content"][0]["text"]
            events.append({"type": "response.output_text.delta", "output_index": i,
                           "item_id": item["id"], "content_index": 0, "delta": t})
            events.append({"type": "response.output_text.done", "output_index": i,
                           "item_id": item["id"], "content_index": 0, "text": t})
        events.append({"type": "response.output_item.done", "output_index": i, "item": item})
    u = {"input_tokens": usage.get("input", 100),
         "input_tokens_details": {"cached_tokens": usage.get("cached", 0)},
         "output_tokens": usage.get("output", 20),
         "output_tokens_details": {"reasoning_tokens": usage.get("reasoning", 0)}}
    u["total_tokens"] = u["input_tokens"] + u["output_tokens"]
    events.append({"type": "response.completed", "response": {
        "id": rid, "status": "completed", "output": items, "usage": u}})
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


class LoopbackResponses:
    """``with LoopbackResponses(steps) as api:`` serves ``api.url`` until the block ends."""

    def __init__(self, steps: list[Step] | None = None, *,
                 usage: dict[str, int] | None = None) -> None:
        self.steps: list[Step] = list(steps or [])
        self.usage = usage or {}
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.headers: list[dict[str, str]] = []
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def _next(self, body: dict[str, Any]) -> list[Item]:
        with self.lock:
            self.requests.append(body)
            if not self.steps:
                self.errors.append("a request after the script ran out")
                return [message("(script exhausted)")]
            step = self.steps.pop(0)
        return step(body) if callable(step) else step

    def __enter__(self) -> LoopbackResponses:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def _send(self, status: int, data: bytes, ctype: str) -> None:
                self.send_response(status)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                with api.lock:
                    api.paths.append("GET " + self.path)
                if self.path.split("?")[0].endswith("/models"):
                    self._send(200, json.dumps({"data": [], "models": []}).encode(),
                               "application/json")
                    return
                self._send(404, b'{"error": {"message": "not here"}}', "application/json")

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                with api.lock:
                    api.paths.append("POST " + self.path)
                    api.headers.append({k.lower(): v for k, v in self.headers.items()})
                if not self.path.split("?")[0].endswith("/responses"):
                    self._send(404, b'{"error": {"message": "not here"}}', "application/json")
                    return
                try:
                    items = api._next(json.loads(raw or b"{}"))
                except Exception as exc:  # a broken step: a 500 the test will see
                    with api.lock:
                        api.errors.append(f"step raised {exc!r}")
                    self._send(500, json.dumps({"error": {"message": str(exc)}}).encode(),
                               "application/json")
                    return
                self._send(200, _sse(items, api.usage), "text/event-stream")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
