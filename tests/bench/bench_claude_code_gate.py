"""Permission request → proposal on the bus, for a real Claude Code session.

The loopback model (tests/loopback_api.py) asks for N edits in a row; for each, the time from
the server handing the tool_use reply to the socket to the ``edit.proposed`` event on portside's
bus (the moment the live screen's diff card is fed). That covers the CLI parsing the stream, its
PreToolUse control request to the SDK, portside computing the diff, and the publish. The screen's
own paint is measured by bench_tui_flood.py. Run: .venv/bin/python -m tests.bench.bench_claude_code_gate
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from portside.core.claude_code.live import ClaudeCodeAgent
from portside.core.log import events as ev
from portside.core.session.config import SessionConfig
from portside.core.session.engine import SessionEngine
from tests.doubles import MemorySink
from tests.loopback_api import LoopbackAPI, text, tool, ws_of

N = int(os.environ.get("BENCH_EDITS", "30"))


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-cc-"))
    project = tmp / "project"
    project.mkdir()
    (project / "train.py").write_text("# v0\nprint('train')\n")
    sent: dict[int, float] = {}
    seen: dict[int, float] = {}

    def edit(i: int) -> Any:
        def step(body: dict[str, Any]) -> list[dict[str, Any]]:
            sent[i] = time.perf_counter()
            return [tool(f"e{i}", "Edit", {"file_path": f"{ws_of(body)}/train.py",
                                           "old_string": f"# v{i}", "new_string": f"# v{i + 1}"})]
        return step

    def read(body: dict[str, Any]) -> list[dict[str, Any]]:
        return [tool("r", "Read", {"file_path": f"{ws_of(body)}/train.py"})]

    steps = [read, *[edit(i) for i in range(N)], [text("stopping here")]]
    with LoopbackAPI(steps) as api:
        os.environ.update(api.claude_code_env(tmp / "cfg"))
        sink = MemorySink()
        config = SessionConfig(project=project, target="cpu", reference_command="true",
                               reference_runs=1, agent=ClaudeCodeAgent("claude-haiku-4-5",
                                                                       max_stop_blocks=0),
                               policy="auto", mode="headless", isolate=True, workdir=tmp / "w")
        engine = SessionEngine(config, sink)

        def on(e: ev.Event) -> None:
            if isinstance(e, ev.EditProposed) and e.after.startswith("# v"):
                seen[int(e.after.split()[1][1:]) - 1] = time.perf_counter()

        engine.bus.subscribe(on)
        asyncio.run(engine.run())
    ms = sorted((seen[i] - sent[i]) * 1000 for i in seen if i in sent)
    assert len(ms) == N, f"{len(ms)} of {N} edits reached the bus"
    p95 = ms[min(len(ms) - 1, int(round(0.95 * len(ms))) - 1)]
    print(f"claude-code permission request -> edit.proposed on the bus, {N} edits: "
          f"median {statistics.median(ms):.1f} ms, p95 {p95:.1f} ms, max {ms[-1]:.1f} ms")


if __name__ == "__main__":
    main()
