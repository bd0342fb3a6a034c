"""Permission request → diff card ON SCREEN, for a real Claude Code session on the live screen.

    .venv/bin/python tests/bench/bench_claude_code_card.py [--edits 30]

The real CLI that claude-agent-sdk bundles, a loopback Messages API (tests/loopback_api.py) that
asks for N edits in a row, the real engine and gate (policy ask), and the live app (120×40,
headless Textual, engine as its worker, as `portside run` does). For each edit, two latencies
until the app writes the card's title (``edit i/i train.py``) to the terminal:

- from the PreToolUse permission request reaching portside (the hook callback is entered);
- from the loopback server handing over the tool_use reply (adds the CLI parsing the stream).

The terminal bytes are rendered from each compositor update as a real terminal run would
(tests/bench/bench_tui_flood.py's PaintLog), so the paint cost is in the figures. The reviewer
approves each card once it is painted (not timed). It also prints the two parts: permission
request → ``edit.proposed`` on the bus (the gate), and bus → card painted (the screen).
Target: p95 < 200 ms. Most of the screen part used to be the Agent column flipping between
narrow and wide on every decision and every new card (each flip re-lays out and repaints every
column); it now stays wide for REVIEW_HOLD_S after a decision (tui/screens/live.py). Figures
from this machine are in the issue notes; under load they swing by 2-3x.
``BENCH_VERBOSE=1`` prints each edit's screen part. Not collected by pytest.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_tui_flood import PaintLog  # noqa: E402
from loopback_api import LoopbackAPI, text, tool  # noqa: E402

from portside.core.claude_code.live import ClaudeCodeAgent  # noqa: E402
from portside.core.log import events as ev  # noqa: E402
from portside.core.session.config import SessionConfig  # noqa: E402
from portside.core.session.engine import SessionEngine  # noqa: E402
from portside.store import Store  # noqa: E402
from portside.tui.app import make_app  # noqa: E402

CSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
TARGET_MS = 200.0


def _ws(body: dict[str, Any]) -> str:
    m = re.search(r"Primary working directory: ([^\\\"]+?)(?:\\n|\")", json.dumps(body))
    assert m, "no working directory in the request"
    return m.group(1).strip()


def _p95(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[int(0.95 * (len(xs) - 1))]


async def main(n: int) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="bench-cc-card-"))
    project = tmp / "project"
    project.mkdir()
    (project / "train.py").write_text("# v0\nprint('train')\n")
    sent: dict[int, float] = {}
    asked: list[float] = []  # PreToolUse entered, in order (one per edit)

    def edit(i: int) -> Any:
        def step(body: dict[str, Any]) -> list[dict[str, Any]]:
            sent[i] = time.perf_counter()
            return [tool(f"e{i}", "Edit", {"file_path": f"{_ws(body)}/train.py",
                                           "old_string": f"# v{i}\n",
                                           "new_string": f"# v{i + 1}\n"})]
        return step

    def read(body: dict[str, Any]) -> list[dict[str, Any]]:
        return [tool("r", "Read", {"file_path": f"{_ws(body)}/train.py"})]

    steps = [read, *[edit(i) for i in range(n)], [text("stopping here")]]
    with LoopbackAPI(steps) as api:
        os.environ.update(ANTHROPIC_API_KEY="sk-bench-0123456789", ANTHROPIC_BASE_URL=api.url,
                          CLAUDE_CONFIG_DIR=str(tmp / "cfg"))
        agent = ClaudeCodeAgent("claude-haiku-4-5", max_stop_blocks=0)
        inner = agent._pre_tool_use

        async def timed(host: Any, inp: dict[str, Any]) -> dict[str, Any]:
            if inp.get("tool_name") == "Edit":
                asked.append(time.perf_counter())
            return await inner(host, inp)

        agent._pre_tool_use = timed  # type: ignore[method-assign]
        store = Store(tmp / "bench.db")
        config = SessionConfig(project=project, target="cpu", reference_command="true",
                               reference_runs=1, agent=agent, policy="ask", mode="live",
                               isolate=True, workdir=tmp / "w")
        engine = SessionEngine(config, store.recorder)
        app = make_app(bus=engine.bus, gate=engine.gate, info=engine.info,
                       engine_run=engine.run, engine_stop=lambda: engine.stop("bench over"))
        painted: dict[int, float] = {}
        on_bus: list[float] = []
        engine.bus.subscribe(lambda e: on_bus.append(time.perf_counter())
                             if isinstance(e, ev.EditProposed) else None)
        answered: list[str] = []
        async with app.run_test(size=(120, 40)) as pilot:
            log = PaintLog(app)
            seen = 0
            deadline = time.monotonic() + 60 + 10 * n
            while len(painted) < n and time.monotonic() < deadline:
                for t, data in log.writes[seen:]:
                    plain = CSI.sub("", data)
                    for i in range(len(painted), n):
                        if f"edit {i + 1}/{i + 1} train.py" in plain:
                            painted[i] = t
                seen = len(log.writes)
                gate = engine.gate
                pending = gate.pending_edits()
                # The reviewer answers edit k once its card is on screen.
                if pending and len(painted) > len(answered):
                    answered.append(pending[0].item_id)
                    gate.approve(pending[0].item_id)
                if gate.pending_claim() is not None:
                    gate.verdict("pass", "bench")
                await asyncio.sleep(0.002)
            # Let the session end in good order (the claim, its verdict) before the app goes.
            end = time.monotonic() + 120
            while engine.result is None and time.monotonic() < end:
                if engine.gate.pending_claim() is not None:
                    engine.gate.verdict("pass", "bench")
                for p in engine.gate.pending_edits():
                    engine.gate.approve(p.item_id)
                await asyncio.sleep(0.05)
            engine.stop("bench over")
            await pilot.pause(0.5)
        store.close()
    if len(painted) < n:
        print(f"FAIL: {len(painted)} of {n} cards painted; server errors: {api.errors}")
        return 1
    from_hook = [(painted[i] - asked[i]) * 1e3 for i in range(n) if i < len(asked)]
    to_bus = [(on_bus[i] - asked[i]) * 1e3 for i in range(min(n, len(asked), len(on_bus)))]
    bus_paint = [(painted[i] - on_bus[i]) * 1e3 for i in range(min(n, len(on_bus)))]
    from_reply = [(painted[i] - sent[i]) * 1e3 for i in range(n) if i in sent]
    for name, xs in (("PreToolUse request -> diff card painted", from_hook),
                     ("tool_use reply sent -> diff card painted", from_reply),
                     ("(part) PreToolUse request -> edit.proposed on the bus", to_bus),
                     ("(part) edit.proposed on the bus -> diff card painted", bus_paint)):
        print(f"claude-code {name}, {len(xs)} edits: p50 {statistics.median(xs):.1f} ms, "
              f"p95 {_p95(xs):.1f} ms, max {max(xs):.1f} ms")
    if os.environ.get("BENCH_VERBOSE"):
        print("bus -> paint per edit (ms):", " ".join(f"{x:.0f}" for x in bus_paint))
    ok = _p95(from_hook) < TARGET_MS
    print(f"target p95 < {TARGET_MS:.0f} ms (permission request -> card on screen): "
          + ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edits", type=int, default=30)
    sys.exit(asyncio.run(main(parser.parse_args().edits)))
