"""The Claude agent, offline, through the real anthropic SDK.

The SDK talks to an ``httpx2.MockTransport`` (this SDK version is built on httpx2 and refuses
plain httpx clients) that answers with Messages API responses in the wire format: JSON errors
and ``text/event-stream`` bodies with message_start, content_block_start/delta/stop (text and
tool_use with input_json_delta pieces), message_delta, message_stop, and ``event: error``.
The host is a small test double over a real Workspace and a real EventBus.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest
from doubles import MemorySink

from portside.core.agent.base import AgentAPIError, AgentStopped, EditOutcome
from portside.core.agent.claude import ClaudeAgent, usage_cost
from portside.core.agent.prompt import NUDGE
from portside.core.log import events as ev
from portside.core.log.bus import EventBus
from portside.core.workspace.edits import Edit
from portside.core.workspace.workspace import Workspace

MODEL = "claude-haiku-4-5"  # priced in core/log/prices.toml, not deprecated in this SDK
KEY = "sk-ant-api03-TESTKEY-0123456789abcdef"

TRAIN_PY = """\
import torch

device = torch.device("cuda")
model = torch.nn.Linear(4, 2).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(10):
    x = torch.randn(8, 4, device=device)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    opt.step()
    print(f"step={step} loss={loss.item()}")
"""


# --- the wire format ---------------------------------------------------------------------------


def _pieces(text: str, n: int) -> list[str]:
    return [text[i : i + n] for i in range(0, len(text), n)] or [""]


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def tool(call_id: str, name: str, input: Any = None, raw_json: str | None = None) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": input or {}, "raw": raw_json}


def sse(
    blocks: list[dict[str, Any]],
    *,
    stop_reason: str | None = None,
    input_tokens: int = 100,
    output_tokens: int = 20,
    cache_read: int = 0,
    overloaded_after: int | None = None,
) -> bytes:
    """A Messages API stream, as the API sends it, for these content blocks. With
    ``overloaded_after=N`` the stream breaks off after N events with an overloaded error."""
    if stop_reason is None:
        stop_reason = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    events: list[tuple[str, dict[str, Any]]] = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_0123",
                    "type": "message",
                    "role": "assistant",
                    "model": MODEL,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {
                        "input_tokens": input_tokens,
                        "output_tokens": 1,
                        "cache_creation_input_tokens": 0,
                        "cache_read_input_tokens": cache_read,
                    },
                },
            },
        ),
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
                {"type": "input_json_delta", "partial_json": p} for p in _pieces(raw, 5)
            ]
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": i, "content_block": start},
            )
        )
        events += [
            ("content_block_delta", {"type": "content_block_delta", "index": i, "delta": d})
            for d in deltas
        ]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": output_tokens},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    if overloaded_after is not None:
        events = events[:overloaded_after] + [
            (
                "error",
                {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
            )
        ]
    return "".join(f"event: {n}\ndata: {json.dumps(d)}\n\n" for n, d in events).encode()


def api_error(status: int, err_type: str, message: str, **headers: str) -> httpx2.Response:
    return httpx2.Response(
        status,
        headers={"content-type": "application/json", "request-id": "req_test", **headers},
        json={"type": "error", "error": {"type": err_type, "message": message}},
    )


class FakeAPI:
    """Answers each request with the next queued response; keeps every request body."""

    def __init__(self, *responses: bytes | httpx2.Response) -> None:
        self.responses = list(responses)
        self.requests: list[dict[str, Any]] = []
        self.headers: list[httpx2.Headers] = []

    def add(self, *responses: bytes | httpx2.Response) -> None:
        self.responses.extend(responses)

    def handler(self, request: httpx2.Request) -> httpx2.Response:
        assert request.url.path == "/v1/messages"
        self.requests.append(json.loads(request.content))
        self.headers.append(request.headers)
        assert self.responses, "the agent sent more requests than the test expected"
        r = self.responses.pop(0)
        if isinstance(r, bytes):
            return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=r)
        return r

    def client(self) -> anthropic.AsyncAnthropic:
        return anthropic.AsyncAnthropic(
            api_key=KEY,
            http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(self.handler)),
            max_retries=2,  # the agent sets 0 for its requests and retries itself
        )


# --- a test host -----------------------------------------------------------------------------


class FakeHost:
    """A real Workspace and EventBus; a scripted reviewer; canned run summaries."""

    def __init__(self, ws: Workspace, reviewer: Any = None) -> None:
        self.session_id = "sess-test"
        self.workspace = ws
        self.task = "Port this project to torch_xla on a TPU v5e (PJRT_DEVICE=TPU)."
        self.sink = MemorySink()
        self.bus = EventBus(self.sink)
        self.reviewer = reviewer or (lambda edit: ("approve", ""))
        self.messages: list[str] = []
        self.checkpoints = 0
        self.stopped = False
        self.candidate_summary = "candidate run#3: passed (exit 0), 10 steps; alarms: none"

    @property
    def events(self) -> list[ev.Event]:
        return self.sink.events

    def of(self, kind: type[ev.Event]) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]

    def publish(self, event: ev.Event) -> ev.Event:
        return self.bus.publish(event)

    async def propose_replace(self, path: str, old: str, new: str, rationale: str) -> EditOutcome:
        return self._review(self.workspace.propose_replace(path, old, new), rationale)

    async def propose_write(self, path: str, content: str, rationale: str) -> EditOutcome:
        return self._review(self.workspace.propose_write(path, content), rationale)

    def _review(self, edit: Edit, rationale: str) -> EditOutcome:
        sid = self.session_id
        self.publish(
            ev.EditProposed(
                session_id=sid,
                edit_id=edit.edit_id,
                path=edit.path,
                before=edit.before,
                after=edit.after,
                rationale=rationale,
            )
        )
        decision, reason = self.reviewer(edit)
        if decision == "reject":
            self.publish(
                ev.EditDecided(
                    session_id=sid, edit_id=edit.edit_id, decision="rejected", reason=reason
                )
            )
            return EditOutcome("rejected", edit.edit_id, reason)
        self.publish(ev.EditDecided(session_id=sid, edit_id=edit.edit_id, decision="approved"))
        self.workspace.apply(edit)
        self.publish(ev.EditApplied(session_id=sid, edit_id=edit.edit_id, path=edit.path))
        return EditOutcome("applied", edit.edit_id, "")

    async def run_reference(self) -> str:
        return "reference run#2: passed"

    async def run_candidate(self) -> str:
        return self.candidate_summary

    def read_run_log(self, run: str = "last", tail: int = 50, grep: str | None = None) -> str:
        return "step=9 loss=0.25"

    async def claim(self, summary: str) -> str:
        self.publish(ev.AgentClaimed(session_id=self.session_id, summary=summary))
        return "Claim recorded: no open error alarms. The reviewer gives the verdict."

    def take_messages(self) -> list[str]:
        out, self.messages = self.messages, []
        return out

    async def checkpoint(self) -> None:
        self.checkpoints += 1
        if self.stopped:
            raise AgentStopped("session ended")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "train.py").write_text(TRAIN_PY)
    return proj


@pytest.fixture
def ws(project: Path, tmp_path: Path) -> Workspace:
    return Workspace.create(project, tmp_path / "workspaces")


@pytest.fixture
def host(ws: Workspace) -> FakeHost:
    return FakeHost(ws)


class Sleeps(list[float]):
    async def __call__(self, seconds: float) -> None:
        self.append(seconds)


def make_agent(api: FakeAPI, **kw: Any) -> tuple[ClaudeAgent, Sleeps]:
    sleeps = Sleeps()
    return ClaudeAgent(MODEL, api.client(), sleep=sleeps, **kw), sleeps


def last_user(request: dict[str, Any]) -> list[dict[str, Any]]:
    msg = request["messages"][-1]
    assert msg["role"] == "user"
    # the agent puts a prompt-cache breakpoint on the last block; compare without it
    return [{k: v for k, v in b.items() if k != "cache_control"} for b in msg["content"]]


def assert_no_secret(host: FakeHost) -> None:
    for e in host.events:
        assert KEY not in ev.encode(e).decode()


OLD = 'import torch\n\ndevice = torch.device("cuda")'
NEW = "import torch\nimport torch_xla\n\ndevice = torch_xla.device()"


# --- scenarios -----------------------------------------------------------------------------


async def test_full_port_reads_edits_runs_and_claims(host: FakeHost, project: Path) -> None:
    intro = (
        "I'll read the training script first. It was written for a CUDA GPU, so the device "
        "selection, the data loading and the step boundaries all need a look.\n\n"
        "Reading train.py now."
    )
    api = FakeAPI(
        sse([text(intro), tool("toolu_01", "read_file", {"path": "train.py"})]),
        sse(
            [
                text("The device is hard-coded to CUDA; torch_xla.device() replaces it."),
                tool(
                    "toolu_02",
                    "propose_edit",
                    {"path": "train.py", "old": OLD, "new": NEW, "rationale": "XLA device"},
                ),
            ]
        ),
        sse([tool("toolu_03", "run_candidate", {})]),
        sse(
            [
                text("The candidate passed with no alarms."),
                tool("toolu_04", "finish", {"summary": "train.py runs on the XLA device."}),
            ],
            cache_read=1000,
        ),
    )
    agent, sleeps = make_agent(api)
    assert agent.label == f"claude:{MODEL}"
    await agent.run(host)

    assert agent.last_stop == "claimed"
    assert len(api.requests) == 4 and host.checkpoints == 4 and sleeps == []
    # the workspace changed, the user's tree did not
    assert host.workspace.read_file("train.py").startswith(NEW)
    assert (project / "train.py").read_text() == TRAIN_PY

    first = api.requests[0]
    assert first["model"] == MODEL and first["stream"] is True
    assert first["system"][0]["text"].startswith("You are porting a PyTorch training project")
    assert {t["name"] for t in first["tools"]} == {
        "list_files",
        "read_file",
        "grep",
        "propose_edit",
        "write_file",
        "run_reference",
        "run_candidate",
        "read_run_log",
        "finish",
    }
    opening = first["messages"][0]["content"][0]["text"]
    assert "torch_xla on a TPU v5e" in opening and "train.py" in opening

    # each tool result went back in the next request, paired with its call
    read_result = last_user(api.requests[1])[0]
    assert read_result["tool_use_id"] == "toolu_01" and read_result["is_error"] is False
    assert '     3\tdevice = torch.device("cuda")' in read_result["content"]
    assert last_user(api.requests[2])[0]["content"].startswith("Edit ")
    assert last_user(api.requests[3])[0]["content"] == host.candidate_summary
    # the assistant turns are in the history, tool_use input parsed from the JSON pieces
    assistant = api.requests[2]["messages"][-2]
    assert assistant["role"] == "assistant"
    assert assistant["content"][1] == {
        "type": "tool_use",
        "id": "toolu_02",
        "name": "propose_edit",
        "input": {"path": "train.py", "old": OLD, "new": NEW, "rationale": "XLA device"},
    }

    kinds = [type(e).__struct_config__.tag for e in host.events]
    assert kinds.count("agent.tool_call") == 4 and kinds.count("agent.tool_result") == 4
    assert kinds.count("agent.usage") == 4
    assert [c.name for c in host.of(ev.AgentToolCall)] == [
        "read_file",
        "propose_edit",
        "run_candidate",
        "finish",
    ]
    assert "edit.applied" in kinds and "agent.claimed" in kinds
    # the call comes before its result, and results carry the call ids
    calls = {c.call_id: c.seq for c in host.of(ev.AgentToolCall)}
    for r in host.of(ev.AgentToolResult):
        assert calls[r.call_id] < r.seq and not r.is_error
    # streamed text, in chunks, adds up to what the model said
    texts = [t.text for t in host.of(ev.AgentText)]
    assert "".join(texts[:2]) == intro and len(texts) >= 2
    # usage and cost per turn (haiku 4.5: $1 in, $5 out per MTok; cache reads at 0.1x)
    usage = host.of(ev.AgentUsage)
    assert usage[0].input_tokens == 100 and usage[0].output_tokens == 20
    assert usage[0].cost_usd == pytest.approx((100 * 1 + 20 * 5) / 1e6)
    assert usage[3].cache_read_tokens == 1000
    assert usage[3].cost_usd == pytest.approx((100 * 1 + 1000 * 0.1 + 20 * 5) / 1e6)
    assert host.of(ev.AgentClaimed)[0].summary == "train.py runs on the XLA device."
    assert_no_secret(host)


async def test_rejected_edit_reason_reaches_the_model(host: FakeHost) -> None:
    reason = "Keep max_norm=1.0: the reference clips at 1.0, changing it changes the numerics."

    def reviewer(edit: Edit) -> tuple[str, str]:
        host.messages.append("Clip after xm.reduce_gradients, not before.")
        return ("reject", reason)

    host.reviewer = reviewer
    api = FakeAPI(
        sse(
            [
                tool(
                    "toolu_10",
                    "propose_edit",
                    {
                        "path": "train.py",
                        "old": "max_norm=1.0",
                        "new": "max_norm=0.05",
                        "rationale": "smaller norm is more stable on TPU",
                    },
                )
            ]
        ),
        sse([tool("toolu_11", "finish", {"summary": "done"})]),
    )
    agent, _ = make_agent(api)
    await agent.run(host)

    blocks = last_user(api.requests[1])
    assert blocks[0] == {
        "type": "tool_result",
        "tool_use_id": "toolu_10",
        "content": f"The reviewer rejected this edit: {reason}",
        "is_error": True,
    }
    # the reviewer's message rides along in the same user turn, after the results
    assert blocks[1] == {
        "type": "text",
        "text": "Message from the reviewer: Clip after xm.reduce_gradients, not before.",
    }
    assert "max_norm=1.0" in host.workspace.read_file("train.py")
    result = host.of(ev.AgentToolResult)[0]
    assert result.is_error and reason in result.content


async def test_rate_limit_then_success_shows_the_wait(host: FakeHost) -> None:
    api = FakeAPI(
        api_error(
            429,
            "rate_limit_error",
            "Number of request tokens has exceeded your rate limit",
            **{"retry-after": "4"},
        ),
        sse([tool("toolu_20", "finish", {"summary": "done"})]),
    )
    agent, sleeps = make_agent(api)
    await agent.run(host)

    assert sleeps == [4.0]  # retry-after honoured, and the SDK did not retry on its own
    assert len(api.requests) == 2 and api.requests[0] == api.requests[1]
    states = [(s.state, s.detail) for s in host.of(ev.SessionState)]
    assert states[0] == ("agent-waiting", "rate limited (429), retrying in 4 s (retry 1 of 4)")
    assert states[1][0] == "agent-running"
    assert agent.last_stop == "claimed"
    # the wait shows before the retried request's events
    waiting = host.of(ev.SessionState)[0].seq
    assert all(u.seq > waiting for u in host.of(ev.AgentUsage))


async def test_overloaded_mid_stream_is_retried_and_nothing_is_lost(host: FakeHost) -> None:
    reply = [
        text("Let me look at the training loop."),
        tool("toolu_30", "read_file", {"path": "train.py"}),
    ]
    api = FakeAPI(
        sse(reply, overloaded_after=5),  # message_start, ping, block start, two deltas, error
        sse(reply),
        sse([tool("toolu_31", "finish", {"summary": "done"})]),
    )
    agent, sleeps = make_agent(api, retry_base_s=2.0)
    await agent.run(host)

    waiting = host.of(ev.SessionState)[0]
    assert waiting.state == "agent-waiting"
    assert waiting.detail.startswith("overloaded (529) in the middle of a reply")
    assert len(sleeps) == 1 and 1.5 <= sleeps[0] <= 2.0  # backoff with jitter
    assert api.requests[0] == api.requests[1]  # the same conversation, sent again
    # the history holds the complete reply once, not the broken one
    history = api.requests[2]["messages"]
    assert [m["role"] for m in history] == ["user", "assistant", "user"]
    assert history[1]["content"][0] == {"type": "text", "text": "Let me look at the training loop."}
    assert len(host.of(ev.AgentToolCall)) == 2 and agent.last_stop == "claimed"


async def test_hard_failure_pauses_and_run_continues_later(host: FakeHost) -> None:
    api = FakeAPI(
        sse([tool("toolu_40", "read_file", {"path": "train.py"})]),
        api_error(529, "overloaded_error", "Overloaded"),
        api_error(529, "overloaded_error", "Overloaded"),
    )
    agent, sleeps = make_agent(api, max_retries=1)
    with pytest.raises(AgentAPIError) as info:
        await agent.run(host)
    assert info.value.status_code == 529 and info.value.retryable
    error = host.of(ev.SessionState)[-1]
    assert error.state == "agent-error"
    assert error.detail.startswith("overloaded (529); gave up after 1 retry")
    assert len(sleeps) == 1

    # the reviewer resumes later, with a message; the conversation goes on where it stopped
    host.messages.append("Go on.")
    api.add(sse([tool("toolu_41", "finish", {"summary": "done"})]))
    await agent.run(host)
    resent = api.requests[-1]["messages"]
    assert resent[:-1] == api.requests[1]["messages"][:-1]
    blocks = last_user(api.requests[-1])
    assert (
        blocks[0]["tool_use_id"] == "toolu_40" and "device = torch.device" in blocks[0]["content"]
    )
    assert blocks[1] == {"type": "text", "text": "Message from the reviewer: Go on."}
    assert agent.last_stop == "claimed"


async def test_auth_failure_is_not_retried_and_leaks_no_key(host: FakeHost) -> None:
    api = FakeAPI(api_error(401, "authentication_error", "invalid x-api-key"))
    agent, sleeps = make_agent(api)
    with pytest.raises(AgentAPIError) as info:
        await agent.run(host)
    assert info.value.status_code == 401 and not info.value.retryable
    assert len(api.requests) == 1 and sleeps == []
    state = host.of(ev.SessionState)[-1]
    assert (state.state, state.detail) == (
        "agent-error",
        "authentication failed (401): invalid x-api-key; the session is paused, resume to try again",
    )
    # the key was sent to the API (this SDK version as a bearer token), and only there
    assert KEY in api.headers[0].get("authorization", "") + api.headers[0].get("x-api-key", "")
    assert_no_secret(host)


async def test_secrets_are_scrubbed_from_results_and_errors(host: FakeHost, project: Path) -> None:
    host.workspace.apply(host.workspace.propose_write(".env", f"ANTHROPIC_API_KEY={KEY}\n"))
    api = FakeAPI(
        sse([tool("toolu_50", "read_file", {"path": ".env"})]),
        api_error(400, "invalid_request_error", f"bad header value {KEY}"),
    )
    agent, _ = make_agent(api)
    with pytest.raises(AgentAPIError) as info:
        await agent.run(host)
    assert KEY not in str(info.value)
    assert "[redacted]" in host.of(ev.AgentToolResult)[0].content
    assert KEY not in json.dumps(api.requests[-1]["messages"])  # nor sent back to the model
    assert_no_secret(host)


async def test_malformed_tool_input_gets_a_clear_error_and_the_loop_continues(
    host: FakeHost,
) -> None:
    api = FakeAPI(
        sse(
            [
                tool("toolu_60", "read_file", {"file": "train.py"}),
                tool("toolu_61", "read_file", {"path": 5}),
                tool("toolu_62", "delete_everything", {"really": True}),
                tool("toolu_63", "propose_edit", {"path": "train.py", "old": "x"}),
                tool("toolu_64", "read_file", {"path": "../../etc/passwd"}),
            ]
        ),
        sse(
            [tool("toolu_65", "read_file", {"path": "train.py", "start_line": 11, "end_line": 11})]
        ),
        sse([tool("toolu_66", "finish", {"summary": "done"})]),
    )
    agent, _ = make_agent(api)
    await agent.run(host)

    results = last_user(api.requests[1])
    assert [r["tool_use_id"] for r in results] == [f"toolu_6{i}" for i in range(5)]
    assert all(r["is_error"] for r in results)
    assert results[0]["content"] == (
        "Invalid input: read_file: unknown field(s) file; read_file takes: path, start_line, end_line"
    )
    assert (
        results[1]["content"]
        == "Invalid input: read_file: field path must be a string, got an integer"
    )
    assert results[2]["content"].startswith(
        "Invalid input: unknown tool 'delete_everything'; the tools are: list_files"
    )
    assert "missing required field(s) new, rationale" in results[3]["content"]
    assert "refused path '../../etc/passwd'" in results[4]["content"]
    ranged = last_user(api.requests[2])[0]
    assert not ranged["is_error"]
    assert ranged["content"].endswith(
        "    11\t    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)"
    )
    assert agent.last_stop == "claimed"


async def test_unparseable_streamed_tool_json_is_asked_again(host: FakeHost) -> None:
    api = FakeAPI(
        sse([tool("toolu_70", "read_file", raw_json='{"path": train.py}')]),
        sse([tool("toolu_71", "finish", {"summary": "done"})]),
    )
    agent, sleeps = make_agent(api)
    await agent.run(host)
    assert host.of(ev.SessionState)[0].detail.startswith("unreadable reply from the API")
    assert len(sleeps) == 1 and agent.last_stop == "claimed"


async def test_cut_off_tool_call_is_not_run(host: FakeHost) -> None:
    api = FakeAPI(
        sse(
            [
                tool(
                    "toolu_80",
                    "write_file",
                    {"path": "new.py", "content": "import tor", "rationale": "x"},
                )
            ],
            stop_reason="max_tokens",
        ),
        sse([tool("toolu_81", "finish", {"summary": "done"})]),
    )
    agent, _ = make_agent(api)
    await agent.run(host)
    result = last_user(api.requests[1])[0]
    assert result["is_error"] and result["content"].startswith("Not run: your reply hit max_tokens")
    assert not host.workspace.exists("new.py")


async def test_idle_agent_is_nudged_once_then_run_returns(host: FakeHost) -> None:
    api = FakeAPI(sse([text("I think it is fine.")]), sse([text("Still fine.")]))
    agent, _ = make_agent(api)
    await agent.run(host)
    assert agent.last_stop == "idle" and len(api.requests) == 2
    assert last_user(api.requests[1]) == [{"type": "text", "text": NUDGE}]
    assert host.of(ev.SessionState)[-1].state == "agent-idle"

    # after a claim or an idle stop, run() again continues the same conversation
    host.messages.append("Run the candidate, please.")
    api.add(sse([tool("toolu_90", "finish", {"summary": "done"})]))
    await agent.run(host)
    assert last_user(api.requests[2]) == [
        {"type": "text", "text": "Message from the reviewer: Run the candidate, please."}
    ]
    assert [m["role"] for m in api.requests[2]["messages"]] == ["user", "assistant"] * 2 + ["user"]


async def test_checkpoint_stop_propagates_before_any_request(host: FakeHost) -> None:
    host.stopped = True
    api = FakeAPI()
    agent, _ = make_agent(api)
    with pytest.raises(AgentStopped):
        await agent.run(host)
    assert api.requests == []


async def test_max_turns_ends_the_run(host: FakeHost) -> None:
    api = FakeAPI(sse([tool("toolu_95", "list_files", {})]))
    agent, _ = make_agent(api, max_turns=1)
    await agent.run(host)
    assert agent.last_stop == "max-turns"
    assert host.of(ev.AgentToolResult)[0].content == "train.py"
    assert host.of(ev.SessionState)[-1].state == "agent-done"


def test_base_url_and_key_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://gateway.internal:8080/anthropic")
    client = ClaudeAgent(MODEL)._client_for_requests()
    assert str(client.base_url).rstrip("/") == "http://gateway.internal:8080/anthropic"
    assert client.api_key == KEY and client.max_retries == 0


def test_usage_cost_uses_the_price_table() -> None:
    assert usage_cost("claude-sonnet-4-5-20250929", 1_000_000, 0) == pytest.approx(3.0)
    assert usage_cost("claude-haiku-4-5", 0, 1_000_000) == pytest.approx(5.0)
    assert usage_cost("claude-sonnet-4-5", 0, 0, cache_write=1_000_000) == pytest.approx(3.75)
    assert usage_cost("some-other-model", 10, 10) is None
