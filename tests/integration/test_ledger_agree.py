"""Every reader of a session's numbers agrees with the ledger, on a session that has them all.

A real Claude agent (the anthropic SDK over HTTP to a loopback Messages API) whose first turn
reports 200k cache-read and 50k cache-write tokens; a criteria file with a budget and `[prices]`
overrides; real reference runs; the reviewer approving an edit and deciding the verdict; a
review note written during replay. The budget must stop the agent at the *recorded* cost (with
cache tokens: above the limit), and `verify --json`'s cost, `show`, `stats`, the report, the
SQL view and the live header must agree on interventions, human minutes, token, compute and
total $.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anthropic
import pytest
from cli_run import cli, cli_in_process

from portside.core.agent.claude import ClaudeAgent
from portside.core.log import events as ev
from portside.core.log.bus import EventBus
from portside.core.log.criteria import load_criteria
from portside.core.session.config import SessionConfig
from portside.core.session.engine import SessionEngine
from portside.core.session.review import ReviewGate
from portside.store import Store

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "fixtures" / "trainers" / "train_tiny.py"
PY = sys.executable
MODEL = "claude-haiku-4-5"  # $1 / $5 per MTok in core/log/prices.toml
KEY = "sk-ant-api03-LEDGER-TEST-0123456789"
CRITERIA = """
[budget]
max_cost_usd = 0.05
[prices]
cpu = 3.6
"human-hour" = 120.0
"""
# 1000 in + 1.25 × 50k cache writes + 0.1 × 200k cache reads at $1, 500 out at $5.
TURN1_USD = (1000 + 1.25 * 50_000 + 0.1 * 200_000) * 1.0 / 1e6 + 500 * 5.0 / 1e6


def _sse(blocks: list[dict[str, Any]], usage: dict[str, int]) -> bytes:
    stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    events: list[dict[str, Any]] = [{"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": MODEL, "content": [],
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": usage["in"], "output_tokens": 1,
                  "cache_creation_input_tokens": usage.get("cw", 0),
                  "cache_read_input_tokens": usage.get("cr", 0)}}}]
    for i, b in enumerate(blocks):
        if b["type"] == "text":
            events += [{"type": "content_block_start", "index": i,
                        "content_block": {"type": "text", "text": ""}},
                       {"type": "content_block_delta", "index": i,
                        "delta": {"type": "text_delta", "text": b["text"]}}]
        else:
            events += [{"type": "content_block_start", "index": i, "content_block": {
                "type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}},
                {"type": "content_block_delta", "index": i, "delta": {
                    "type": "input_json_delta", "partial_json": json.dumps(b["input"])}}]
        events.append({"type": "content_block_stop", "index": i})
    events += [{"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": usage["out"]}}, {"type": "message_stop"}]
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


class MessagesAPI(ThreadingHTTPServer):
    """A loopback Messages API: each POST /v1/messages gets the next scripted stream."""

    def __init__(self, replies: list[bytes]) -> None:
        self.replies = replies
        self.requests: list[dict[str, Any]] = []
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: MessagesAPI

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["content-length"]))
        self.server.requests.append(json.loads(body))
        reply = self.server.replies.pop(0) if self.server.replies else _sse(
            [{"type": "text", "text": "nothing more"}], {"in": 10, "out": 1})
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args: Any) -> None:
        pass


def _run_session(tmp: Path, api: MessagesAPI, db: Path) -> str:
    project = tmp / "proj"
    project.mkdir()
    shutil.copy(TINY, project / "train.py")
    crit = tmp / "criteria.toml"
    crit.write_text(CRITERIA)
    client = anthropic.AsyncAnthropic(api_key=KEY, base_url=f"http://127.0.0.1:{api.server_port}")
    config = SessionConfig(
        project=project, target="cpu", reference_command=f"{PY} train.py --steps 20",
        criteria=load_criteria(crit), criteria_path=str(crit), reference_runs=2,
        agent=ClaudeAgent(MODEL, client), policy="ask", mode="live", isolate=True,
        work_root=tmp / "work", stall_s=60, timeout_s=300,
    )
    store = Store(db)
    engine = SessionEngine(config, store.recorder)

    async def reviewer() -> None:
        gate = engine.gate
        while True:
            await asyncio.sleep(0.05)
            if gate.pending_edits():
                gate.approve()
            claim = gate.pending_claim()
            if claim is not None and claim.kind == "budget":
                gate.verdict("fail", "over budget")
                return

    async def both() -> Any:
        task = asyncio.create_task(reviewer())
        try:
            return await engine.run()
        finally:
            task.cancel()

    result = asyncio.run(both())
    store.recorder.flush()
    (tmp / "result.json").write_text(json.dumps(result.to_json(), default=str))
    # A review note written while replaying the finished session, durably, into its log.
    gate = ReviewGate(EventBus(store.recorder), engine.session_id, policy="ask")
    gate.during_replay = True
    gate.note("checked the clipping after the fact")
    store.recorder.flush()
    store.close()
    return engine.session_id


@pytest.mark.slow
def test_every_reader_agrees_with_the_ledger(tmp_path: Path) -> None:
    line = 'p.add_argument("--max-norm", type=float, default=1.0)'
    edit = {"path": "train.py", "old": line, "new": line + "  # as the reference",
            "rationale": "mark the clip"}
    api = MessagesAPI([
        _sse([{"type": "text", "text": "Reading done; one edit."},
              {"type": "tool_use", "id": "t1", "name": "propose_edit", "input": edit}],
             {"in": 1000, "out": 500, "cr": 200_000, "cw": 50_000}),
        _sse([{"type": "tool_use", "id": "t2", "name": "run_candidate", "input": {}}],
             {"in": 100, "out": 10}),
    ])
    threading.Thread(target=api.serve_forever, daemon=True).start()
    db = tmp_path / "s.db"
    try:
        sid = _run_session(tmp_path, api, db)
    finally:
        api.shutdown()
    result = json.loads((tmp_path / "result.json").read_text())

    with Store(db) as store:
        led = store.ledger(sid)
        ended = next(e for e in store.events(sid) if isinstance(e, ev.SessionEnded))
        view = store.session(sid)
        usage = [e for e in store.events(sid, kinds=["agent.usage"])]
    # The budget stopped the agent at the recorded cost: the candidate never ran.
    assert usage[0].cost_usd == pytest.approx(TURN1_USD)  # type: ignore[attr-defined]
    assert led.token_usd == pytest.approx(TURN1_USD + (100 * 1 + 10 * 5) / 1e6)
    assert led.attempts == 0 and "budget-exhausted" in {a.check for a in led.alarms.values()}
    assert (ended.verdict, ended.reason) == ("fail", "reviewer: over budget")
    assert led.verdict == ("fail", "over budget")
    assert led.interventions == 2 and led.review_notes == 1  # approve, verdict; the note apart
    assert led.compute_usd > 0 and len(led.valid_references()) == 2
    # Priced as the engine did before the ledger (no cache tokens), the budget was not reached.
    from portside.core.log.costs import token_cost

    old = token_cost(MODEL, 1000, 500, led.prices) or 0.0
    assert old + led.compute_usd + led.human_usd < 0.05 < led.total_usd
    # compute uses the recorded [prices]: 36 $/cpu-hour × the references' wall time × vCPUs
    facts_usd = sum(r.compute_usd or 0 for r in led.runs.values())
    assert led.compute_usd == pytest.approx(facts_usd)

    want = {"interventions": led.interventions, "human_minutes": round(led.human_minutes, 4),
            "tokens_usd": round(led.token_usd, 4), "compute_usd": round(led.compute_usd, 4),
            "total_usd": round(led.total_usd, 4)}

    def rounded(d: dict[str, Any]) -> dict[str, Any]:
        return {k: round(float(d[k]), 4) if k != "interventions" else int(d[k]) for k in want}

    # The engine's JSON (what `verify --json` / `run --json` print): the same numbers.
    got_json = rounded({**result["cost"], "interventions": result["cost"]["interventions"]})
    assert got_json == want, got_json
    # `portside stats --format json`
    stats = json.loads(cli_in_process("stats", "--format", "json", db=db).stdout)
    # (a session with no candidate run is listed apart from the migrations, issue 41.7)
    row = (stats["sessions"] + stats["abandoned"])[0]
    assert rounded(row) == want, row
    # The SQL view (Datasette users): interventions, human time, tokens.
    assert view["interventions"] == want["interventions"]
    assert (view["attempts"], view["failures"], view["silent_failures"]) == (
        led.attempts, led.failures, led.silent_failures)
    assert round(view["human_s"] / 60, 4) == want["human_minutes"]
    assert round(view["token_usd"], 4) == want["tokens_usd"]
    # `portside show`
    show = cli_in_process("show", sid, "--limit", "1", db=db).stdout
    assert f"interventions {led.interventions} " in show
    assert f"human {led.human_minutes:.1f} min" in show
    m = re.search(r"compute \$([\d.]+)  tokens \$([\d.]+)  human \$([\d.]+)  total \$([\d.]+)", show)
    assert m and [float(x) for x in m.groups()] == pytest.approx(
        [led.compute_usd, led.token_usd, led.human_usd, led.total_usd], abs=1e-4)
    # The report
    report = cli_in_process("export", sid, "--what", "report", db=db).stdout
    assert f"- Interventions: {led.interventions} (steering: {led.steering})" in report
    assert f"human time: {led.human_minutes:.1f} min" in report
    assert f"total: ${led.total_usd:,.2f}" in report and "review notes (replay): 1" in report
    assert f"tokens: ${led.token_usd:,.2f}" in report
    assert f"Compute: ${led.compute_usd:,.2f}" in report

    # The live header (Pilot) over the stored log.
    from portside.tui.app import make_app

    async def header() -> str:
        with Store(db) as store:
            events = list(store.events(sid))
        bus = EventBus(None)
        gate = ReviewGate(bus, sid, policy="ask")
        app = make_app(bus=bus, gate=gate, info={"session_id": sid}, history=events)
        async with app.run_test(size=(160, 40)) as pilot:
            await pilot.pause()
            return app.live.header_text(events[-1].ts).plain

    text = asyncio.run(header())
    assert f"${led.compute_usd:.2f} compute + ${led.token_usd:.2f} tokens" in text, text
    assert f"{led.human_minutes:.1f} min human" in text
    noun = "intervention" if led.interventions == 1 else "interventions"  # "1 intervention"
    assert f"{led.interventions} {noun}" in text and "1 review note" in text


def test_the_cli_is_its_own_room() -> None:
    """`python -m portside.cli` is the command; tui holds no CLI code any more."""
    res = cli("--version")
    assert res.returncode == 0 and "portside" in res.stdout
    assert not (REPO / "tui" / "cli.py").exists()
