"""The Claude agent: a tool-use loop on the anthropic SDK (async client, streaming).

Each turn: deliver pending tool results and reviewer messages as one user message, wait at
``host.checkpoint()`` (pause/stop), stream the reply (text published as ``agent.text`` in
paragraph-sized chunks, at the latest when its content block ends), publish ``agent.usage`` with
its $ cost, then run the reply's tool calls through the host (``agent.tool_call`` /
``agent.tool_result``). ``run`` returns when the agent calls ``finish`` or stops calling tools;
the conversation stays on the instance, so ``run`` can be called again to continue.

Retries are done here, not by the SDK (its ``max_retries`` is set to 0 for our requests): one
loop covers HTTP errors (429, 529, 5xx, 408, 409, connection errors) *and* errors that arrive
inside a 200 stream (``event: error``, which the SDK cannot retry), honours ``retry-after`` /
``retry-after-ms`` / ``x-should-retry``, and shows the wait as it happens::

    session.state  agent-waiting  "rate limited (429), retrying in 4 s (retry 1 of 4)"
    session.state  agent-running  "the API answered again after 1 retry"
    session.state  agent-error    "authentication failed (401): invalid x-api-key"  (then AgentAPIError)
    session.state  agent-idle     the model stopped calling tools without claiming
    session.state  agent-done     max_turns reached

The API key is read by the SDK (``ANTHROPIC_API_KEY``; ``ANTHROPIC_BASE_URL`` is honoured, we
never set ``base_url``) and is scrubbed from everything this agent publishes.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anthropic

from portside.core.log import events as ev
from portside.core.log.costs import PriceTable, default_prices, token_cost
from portside.core.safety.secrets import map_text

from . import tools
from .base import AgentAPIError, AgentHost, AgentStopped
from .prompt import NUDGE, SYSTEM_PROMPT, first_message

__all__ = ["AgentAPIError", "ClaudeAgent", "usage_cost"]

#: Prompt-cache multipliers on the input price (Anthropic: 5-minute cache write 1.25×, read 0.1×).
#: Longest wait the agent accepts from a retry-after header.
MAX_RETRY_AFTER_S = 600.0
#: Flush streamed text at a line break once this much has accumulated.
TEXT_CHUNK_CHARS = 160

Sleep = Callable[[float], Awaitable[Any]]


def usage_cost(
    model: str,
    input_tokens: int,
    output_tokens: int,
    cache_read: int = 0,
    cache_write: int = 0,
    table: PriceTable | None = None,
) -> float | None:
    """USD for one turn from core/log/prices.toml (per MTok); None when the model has no price."""
    return token_cost(model, input_tokens, output_tokens, table or default_prices(),
                      cache_read=cache_read, cache_write=cache_write)


class _Chunker:
    """Streamed text → readable chunks: whole lines once enough has gathered, the rest at
    the end of the content block."""

    def __init__(self) -> None:
        self.buf = ""

    def add(self, text: str) -> str:
        self.buf += text
        if len(self.buf) >= TEXT_CHUNK_CHARS and (cut := self.buf.rfind("\n")) >= 0:
            out, self.buf = self.buf[: cut + 1], self.buf[cut + 1 :]
            return out
        return ""

    def flush(self) -> str:
        out, self.buf = self.buf, ""
        return out


class _Failure:
    """One failed attempt, classified."""

    def __init__(self, reason: str, retryable: bool, status: int | None, delay: float | None):
        self.reason = reason
        self.retryable = retryable
        self.status = status
        self.delay = delay  # what the server asked for, if it did


class ClaudeAgent:
    def __init__(
        self,
        model: str,
        client: anthropic.AsyncAnthropic | None = None,
        *,
        max_turns: int = 80,
        max_tokens: int = 8192,
        max_retries: int = 4,
        retry_base_s: float = 1.0,
        retry_max_s: float = 30.0,
        prices: PriceTable | None = None,
        system: str = SYSTEM_PROMPT,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.model = model
        self.label = f"claude:{model}"
        self.max_turns = max_turns
        self.max_tokens = max_tokens
        self.max_retries = max_retries
        self.retry_base_s = retry_base_s
        self.retry_max_s = retry_max_s
        self.prices = prices
        self.system = system
        self._sleep = sleep
        self._client = client
        self._requests_client: anthropic.AsyncAnthropic | None = None
        # The conversation so far (Messages API params); kept across run() calls.
        self.messages: list[dict[str, Any]] = []
        self.turns = 0
        #: Why the last run() returned: "claimed" | "idle" | "max-turns" | "" (not yet).
        self.last_stop = ""
        self._results: list[dict[str, Any]] = []  # tool_result blocks not yet sent
        self._notes: list[str] = []  # portside's own notes for the next user turn
        self._idle_turns = 0

    # ---- resuming a killed session ----------------------------------------------------------

    def spec(self) -> dict[str, Any]:
        """How to build this agent again (the API key is read again from the environment)."""
        return {"kind": "claude", "model": self.model, "max_turns": self.max_turns}

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> ClaudeAgent:
        if spec.get("max_turns"):
            return cls(model=str(spec["model"]), max_turns=int(spec["max_turns"]))
        return cls(model=str(spec["model"]))

    def restore(self, events: list[ev.Event], host: AgentHost) -> None:
        """Rebuild the conversation from a killed session's log (best effort).

        The log holds what the model said (``agent.text``, in streamed chunks), its tool calls
        and their results, one ``agent.usage`` per completed reply, and the reviewer's messages
        (``intervention`` "message"). From them: the opening user turn (written again from the
        task and the workspace as it is now), then per reply an assistant message (its text
        joined, its tool_use blocks) and a user message with the tool results and the reviewer
        messages sent with it. Not recoverable: thinking blocks and exact text chunking (the
        log does not keep them), a reply cut off before its usage (asked again), portside's own
        nudges. Tool calls without a result are answered "interrupted" at the next turn, and
        reviewer messages after the last reply are delivered with it."""
        files = host.workspace.list_files(limit=300)
        opening = first_message(getattr(host, "task", "") or "", list(files), files.truncated)
        messages: list[dict[str, Any]] = [{"role": "user",
                                           "content": [{"type": "text", "text": opening}]}]
        text: list[str] = []  # chunks of the reply being streamed
        reply: dict[str, Any] | None = None  # the last completed assistant message
        user: list[dict[str, Any]] = []  # blocks for the next user turn
        turns = 0
        for e in events:
            if isinstance(e, ev.AgentText):
                text.append(e.text)
            elif isinstance(e, ev.AgentUsage):
                if reply is not None:
                    messages.append({"role": "user", "content": user
                                     or [{"type": "text", "text": NUDGE}]})
                    user = []
                elif user:  # reviewer messages sent with the opening turn
                    messages[0]["content"].extend(user)
                    user = []
                reply = {"role": "assistant",
                         "content": [{"type": "text", "text": "".join(text)}] if text else []}
                messages.append(reply)
                text, turns = [], turns + 1
            elif isinstance(e, ev.AgentToolCall) and reply is not None:
                reply["content"].append({"type": "tool_use", "id": e.call_id, "name": e.name,
                                         "input": e.input})
            elif isinstance(e, ev.AgentToolResult) and reply is not None:
                user.append({"type": "tool_result", "tool_use_id": e.call_id,
                             "content": e.content, "is_error": e.is_error})
            elif isinstance(e, ev.Intervention) and e.action == "message" and e.note:
                user.append({"type": "text", "text": f"Message from the reviewer: {e.note}"})
        for m in messages:
            if m["role"] == "assistant" and not m["content"]:
                m["content"] = [{"type": "text", "text": "(empty reply)"}]
        self.messages = messages if reply is not None else []
        self.turns = turns
        # What was not sent yet goes with the next user turn (_prepare_user_turn).
        self._results = [b for b in user if b["type"] == "tool_result"]
        # Without any reply yet, run() writes the opening turn itself, with these notes.
        self._notes = [b["text"] for b in user if b["type"] == "text"]
        self.last_stop = ""

    # ---- the loop ---------------------------------------------------------------------------

    async def run(self, host: AgentHost) -> None:
        self.last_stop = ""
        while True:
            if self.turns >= self.max_turns:
                self.last_stop = "max-turns"
                self._publish(
                    host,
                    ev.SessionState(
                        session_id=host.session_id,
                        state="agent-done",
                        detail=f"the agent used its {self.max_turns} turns without claiming success",
                    ),
                )
                return
            self._prepare_user_turn(host)
            message = await self._request(host)
            self.turns += 1
            self._publish_usage(host, message)
            self.messages.append({"role": "assistant", "content": _to_params(message.content)})

            calls = [b for b in message.content if b.type == "tool_use"]
            if not calls:
                if message.stop_reason == "max_tokens":
                    self._notes.append(
                        "(portside) Your reply was cut off at max_tokens; continue where it stopped."
                    )
                    continue
                if self._idle_turns >= 1:
                    self.last_stop = "idle"
                    self._publish(
                        host,
                        ev.SessionState(
                            session_id=host.session_id,
                            state="agent-idle",
                            detail="the agent stopped without claiming success; "
                            "a reviewer message continues it",
                        ),
                    )
                    self._idle_turns = 0
                    return
                self._idle_turns += 1
                self._notes.append(NUDGE)
                continue
            self._idle_turns = 0

            claimed = False
            for block in calls:
                self._publish(
                    host,
                    ev.AgentToolCall(
                        session_id=host.session_id,
                        call_id=block.id,
                        name=block.name,
                        input=block.input if isinstance(block.input, dict) else {"_": block.input},
                    ),
                )
                if message.stop_reason == "max_tokens" and block is message.content[-1]:
                    # Its input JSON was cut off: running it could write half a file.
                    result = tools.ToolResult(
                        "Not run: your reply hit max_tokens while writing this call, so its "
                        "input is incomplete. Call it again (split large writes into edits).",
                        is_error=True,
                    )
                else:
                    result = await tools.execute(host, block.name, block.input)
                content = self._scrub(result.content)
                self._results.append(
                    {
                        "type": "tool_result",
                        "tool_use_id": block.id,
                        "content": content,
                        "is_error": result.is_error,
                    }
                )
                self._publish(
                    host,
                    ev.AgentToolResult(
                        session_id=host.session_id,
                        call_id=block.id,
                        content=content,
                        is_error=result.is_error,
                    ),
                )
                claimed = claimed or result.claimed
            if claimed:
                self.last_stop = "claimed"
                return

    def _prepare_user_turn(self, host: AgentHost) -> None:
        """Put tool results, portside's notes and reviewer messages into the next user turn."""
        results = self._results
        if self.messages and self.messages[-1]["role"] == "assistant":
            # Every tool_use needs a result, also when a run was interrupted mid-way.
            answered = {r["tool_use_id"] for r in results}
            for block in self.messages[-1]["content"]:
                if block.get("type") == "tool_use" and block["id"] not in answered:
                    results.append(
                        {
                            "type": "tool_result",
                            "tool_use_id": block["id"],
                            "content": "Not run: the session was interrupted before this call ran.",
                            "is_error": True,
                        }
                    )
        texts = list(self._notes)
        texts += [f"Message from the reviewer: {m}" for m in host.take_messages()]
        self._results, self._notes = [], []
        extra = [{"type": "text", "text": t} for t in texts]
        if not self.messages:
            files = host.workspace.list_files(limit=300)
            opening = first_message(getattr(host, "task", "") or "", list(files), files.truncated)
            self.messages.append(
                {"role": "user", "content": [{"type": "text", "text": opening}, *extra]}
            )
        elif self.messages[-1]["role"] == "user":
            # The last request failed (AgentAPIError) and is being sent again.
            self.messages[-1]["content"].extend(results + extra)
        else:
            content = results + extra
            if not content:
                content = [{"type": "text", "text": NUDGE}]  # run() again after an idle stop
            self.messages.append({"role": "user", "content": content})

    # ---- one API call, with retries ---------------------------------------------------------

    def _client_for_requests(self) -> anthropic.AsyncAnthropic:
        if self._requests_client is None:
            client = self._client or anthropic.AsyncAnthropic()
            self._client = client
            self._requests_client = client.with_options(max_retries=0)
        return self._requests_client

    async def _request(self, host: AgentHost) -> Any:
        retries = 0
        while True:
            await host.checkpoint()
            try:
                message = await self._stream_once(host)
            except AgentStopped:
                raise
            except anthropic.APIStatusError as exc:
                failure = _classify_status(exc)
            except anthropic.APITimeoutError:
                failure = _Failure("the API timed out", True, None, None)
            except anthropic.APIConnectionError as exc:
                failure = _Failure(f"connection error ({exc})", True, None, None)
            except anthropic.AnthropicError as exc:
                failure = _Failure(f"{type(exc).__name__}: {exc}", False, None, None)
            except ValueError as exc:
                # The SDK could not parse the streamed tool input; asking again usually works.
                failure = _Failure(f"unreadable reply from the API ({exc})", True, None, None)
            else:
                if retries:
                    self._publish(
                        host,
                        ev.SessionState(
                            session_id=host.session_id,
                            state="agent-running",
                            detail=f"the API answered again after {_plural(retries, 'retry', 'retries')}",
                        ),
                    )
                return message

            if not failure.retryable or retries >= self.max_retries:
                detail = failure.reason
                if failure.retryable:
                    detail += f"; gave up after {_plural(retries, 'retry', 'retries')}"
                detail += "; the session is paused, resume to try again"
                detail = self._scrub(detail)
                self._publish(
                    host,
                    ev.SessionState(session_id=host.session_id, state="agent-error", detail=detail),
                )
                raise AgentAPIError(detail, status_code=failure.status, retryable=failure.retryable)
            delay = self._delay(retries, failure.delay)
            retries += 1
            self._publish(
                host,
                ev.SessionState(
                    session_id=host.session_id,
                    state="agent-waiting",
                    detail=self._scrub(
                        f"{failure.reason}, retrying in {_seconds(delay)} "
                        f"(retry {retries} of {self.max_retries})"
                    ),
                ),
            )
            await self._sleep(delay)

    def _delay(self, retries: int, asked: float | None) -> float:
        if asked is not None and asked >= 0:
            return min(asked, MAX_RETRY_AFTER_S)
        backoff = min(self.retry_base_s * 2.0**retries, self.retry_max_s)
        return backoff * (1 - 0.25 * random.random())  # jitter spreads retry storms

    async def _stream_once(self, host: AgentHost) -> Any:
        client = self._client_for_requests()
        chunker = _Chunker()
        async with client.messages.stream(
            model=self.model,
            max_tokens=self.max_tokens,
            system=[{"type": "text", "text": self.system, "cache_control": {"type": "ephemeral"}}],
            tools=tools.tool_specs(),  # type: ignore[arg-type]
            messages=_with_cache_breakpoint(self.messages),  # type: ignore[arg-type]
        ) as stream:
            async for event in stream:
                if event.type == "text":
                    self._say(host, chunker.add(event.text))
                elif event.type == "content_block_stop":
                    self._say(host, chunker.flush())
            message = await stream.get_final_message()
        self._say(host, chunker.flush())
        return message

    # ---- publishing -------------------------------------------------------------------------

    def _say(self, host: AgentHost, text: str) -> None:
        if text.strip():
            self._publish(host, ev.AgentText(session_id=host.session_id, text=text))

    def _publish_usage(self, host: AgentHost, message: Any) -> None:
        u = message.usage
        model = getattr(message, "model", None) or self.model
        cache_read = u.cache_read_input_tokens or 0
        cache_write = u.cache_creation_input_tokens or 0
        # The session's table (its [prices] overrides) unless this agent was given its own.
        table = self.prices or getattr(host, "prices", None)
        cost = usage_cost(model, u.input_tokens, u.output_tokens, cache_read, cache_write, table)
        self._publish(
            host,
            ev.AgentUsage(
                session_id=host.session_id,
                model=model,
                input_tokens=u.input_tokens,
                output_tokens=u.output_tokens,
                cache_read_tokens=cache_read,
                cache_write_tokens=cache_write,
                cost_usd=cost or 0.0,  # unpriced models: 0 here, listed by the ledger
            ),
        )

    def _secrets(self) -> list[str]:
        client = self._client
        found = [getattr(client, "api_key", None), getattr(client, "auth_token", None)]
        return [s for s in found if isinstance(s, str) and len(s) >= 8]

    def _scrub(self, text: str) -> str:
        for secret in self._secrets():
            text = text.replace(secret, "[redacted]")
        return text

    def _publish(self, host: AgentHost, event: ev.Event) -> None:
        if self._secrets():
            for field in ("text", "content", "detail"):
                value = getattr(event, field, None)
                if isinstance(value, str):
                    setattr(event, field, self._scrub(value))
            if isinstance(event, ev.AgentToolCall):
                event.input = map_text(event.input, self._scrub)
        host.publish(event)


# ---- helpers ------------------------------------------------------------------------------


def _to_params(content: list[Any]) -> list[dict[str, Any]]:
    """Reply content blocks → request params for the history (empty text blocks dropped: the
    API refuses them)."""
    out: list[dict[str, Any]] = []
    for b in content:
        if b.type == "text":
            if b.text:
                out.append({"type": "text", "text": b.text})
        elif b.type == "tool_use":
            out.append({"type": "tool_use", "id": b.id, "name": b.name, "input": b.input})
        elif b.type == "thinking":
            out.append({"type": "thinking", "thinking": b.thinking, "signature": b.signature})
        elif b.type == "redacted_thinking":
            out.append({"type": "redacted_thinking", "data": b.data})
        else:
            out.append(b.to_dict())
    return out or [{"type": "text", "text": "(empty reply)"}]


def _with_cache_breakpoint(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A copy of the history whose last block carries a prompt-cache breakpoint, so each turn
    reads the conversation so far from the cache instead of paying for it again."""
    if not messages or not messages[-1]["content"]:
        return messages
    last = dict(messages[-1])
    blocks = list(last["content"])
    blocks[-1] = {**blocks[-1], "cache_control": {"type": "ephemeral"}}
    last["content"] = blocks
    return [*messages[:-1], last]


_KIND_BY_TYPE = {
    "rate_limit_error": ("rate limited", 429),
    "overloaded_error": ("overloaded", 529),
    "api_error": ("API server error", 500),
    "timeout_error": ("API timeout", 504),
}
_KIND_BY_STATUS = {
    400: "bad request",
    401: "authentication failed",
    402: "payment required",
    403: "permission denied",
    404: "not found (is the model name right?)",
    408: "request timeout",
    409: "conflict",
    413: "request too large",
    429: "rate limited",
    529: "overloaded",
}


def _classify_status(exc: anthropic.APIStatusError) -> _Failure:
    status = exc.status_code
    err_type = exc.type or ""
    mid_stream = status < 400  # an `event: error` inside a 200 stream
    if mid_stream or err_type in _KIND_BY_TYPE:
        kind, code = _KIND_BY_TYPE.get(err_type, ("API error", 500))
        if not mid_stream:
            code = status
    else:
        code = status
        kind = _KIND_BY_STATUS.get(status, "server error" if status >= 500 else "API error")
    reason = f"{kind} ({code})"
    if mid_stream:
        reason += " in the middle of a reply; the partial reply was discarded"
    retryable = code in (408, 409, 429) or code >= 500
    headers = exc.response.headers
    should = headers.get("x-should-retry")
    if should == "true":
        retryable = True
    elif should == "false":
        retryable = False
    if not retryable and exc.api_message:
        reason += f": {exc.api_message}"
    return _Failure(reason, retryable, code, _retry_after(headers))


def _retry_after(headers: Any) -> float | None:
    """Seconds the server asked us to wait (retry-after-ms, retry-after seconds or date)."""
    try:
        if (ms := headers.get("retry-after-ms")) is not None:
            return float(ms) / 1000.0
    except ValueError:
        pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        parsed = email.utils.parsedate_tz(value)
        if parsed is None:
            return None
        return max(float(email.utils.mktime_tz(parsed) - time.time()), 0.0)


def _seconds(s: float) -> str:
    return f"{s:.0f} s" if s >= 1.5 else f"{s:.1f} s"


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


