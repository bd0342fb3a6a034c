"""Permission request → diff card ON SCREEN, for a real Claude Code session on the live screen.

    .venv/bin/python -m tests.bench.bench_claude_code_card [--edits 30]

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
column); it now stays wide for REVIEW_HOLD_S after a decision (tui/screens/review.py). Figures
from this machine are in the issue notes; under load they swing by 2-3x.
The timing loop is tests/bench/card_latency.py's, shared with bench_codex_card.py (which runs
both side by side). Not collected by pytest.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from portside.core.claude_code.live import ClaudeCodeAgent
from portside.core.session.config import SessionConfig
from portside.core.session.engine import SessionEngine
from portside.store import Store
from tests.bench.card_latency import Marks, paint_cards, report, say_load
from tests.loopback_api import LoopbackAPI, text, tool, ws_of


async def claude_code_cards(n: int) -> dict[str, list[float]]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-cc-card-"))
    project = tmp / "project"
    project.mkdir()
    (project / "train.py").write_text("# v0\nprint('train')\n")
    marks = Marks()

    def edit(i: int) -> Any:
        def step(body: dict[str, Any]) -> list[dict[str, Any]]:
            marks.sent[i] = time.perf_counter()
            return [tool(f"e{i}", "Edit", {"file_path": f"{ws_of(body)}/train.py",
                                           "old_string": f"# v{i}\n",
                                           "new_string": f"# v{i + 1}\n"})]
        return step

    def read(body: dict[str, Any]) -> list[dict[str, Any]]:
        return [tool("r", "Read", {"file_path": f"{ws_of(body)}/train.py"})]

    steps = [read, *[edit(i) for i in range(n)], [text("stopping here")]]
    with LoopbackAPI(steps) as api:
        os.environ.update(api.claude_code_env(tmp / "cfg"))
        agent = ClaudeCodeAgent("claude-haiku-4-5", max_stop_blocks=0)
        inner = agent._pre_tool_use

        async def timed(host: Any, inp: dict[str, Any]) -> dict[str, Any]:
            if inp.get("tool_name") == "Edit":
                marks.asked.append(time.perf_counter())
            return await inner(host, inp)

        agent._pre_tool_use = timed  # type: ignore[method-assign]
        store = Store(tmp / "bench.db")
        config = SessionConfig(project=project, target="cpu", reference_command="true",
                               reference_runs=1, agent=agent, policy="ask", mode="live",
                               isolate=True, workdir=tmp / "w")
        ms = await paint_cards(SessionEngine(config, store.recorder), n, marks)
        store.close()
    if not ms:
        print(f"FAIL: not every one of {n} cards was painted; server errors: {api.errors}")
    return ms


def report_claude_code(ms: dict[str, list[float]]) -> bool:
    return bool(ms) and report("claude-code", "PreToolUse request", "tool_use reply sent", ms)


async def main(n: int) -> int:
    say_load()
    return 0 if report_claude_code(await claude_code_cards(n)) else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edits", type=int, default=30)
    sys.exit(asyncio.run(main(parser.parse_args().edits)))
