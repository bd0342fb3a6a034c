"""Permission request -> diff card ON SCREEN, for a real Codex session on the live screen.

    .venv/bin/python -m tests.bench.bench_codex_card [--edits 30]

The real Codex CLI (PORTSIDE_CODEX_CLI or `codex` on PATH) through `codex app-server`, a
loopback Responses API (tests/loopback_responses.py) that asks for N patches in a row, the real
engine and gate (policy ask), and the live app (120x40, headless Textual, engine as its worker,
as `portside run --agent codex` does). For each patch, two latencies until the app writes the
card's title (``edit i/i train.py``) to the terminal:

- from Codex's ``item/fileChange/requestApproval`` reaching portside (the request is read);
- from the loopback server handing over the apply_patch reply (adds Codex parsing it).

The terminal bytes are rendered from each compositor update (tests/bench/bench_tui_flood.py's
PaintLog), so the paint cost is in the figures. The reviewer approves each card once painted
(not timed); the loop is tests/bench/card_latency.py's, shared with bench_claude_code_card.py,
which runs right after in the same process (``--alone``: Codex only), so the two p95s and their
ratio come from one run at one load. Target, as for Claude Code: p95 < 200 ms, a TARGET line
each. Skips (exit 0, says so) where the Codex CLI is not installed. Not collected by pytest.
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

from portside.core.codex.live import CodexAgent
from portside.core.session.engine import SessionConfig, SessionEngine
from portside.store import Store
from tests.bench.card_latency import Marks, p95, paint_cards, report, say_load
from tests.codex_cli import CODEX
from tests.loopback_responses import LoopbackResponses, codex_home, message, patch


async def codex_cards(n: int) -> dict[str, list[float]]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-codex-card-"))
    project = tmp / "project"
    project.mkdir()
    (project / "train.py").write_text("# v0\nprint('train')\n")
    marks = Marks()  # asked: fileChange approval requests read, in order (one per patch)

    def edit(i: int) -> Any:
        def step(body: dict[str, Any]) -> list[dict[str, Any]]:
            marks.sent[i] = time.perf_counter()
            return [patch(f"*** Update File: train.py\n@@\n-# v{i}\n+# v{i + 1}")]
        return step

    steps = [*[edit(i) for i in range(n)], [message("stopping here")]]
    with LoopbackResponses(steps) as api:
        os.environ.update(CODEX_HOME=str(codex_home(tmp / "codex-home", api.url)),
                          LOOPBACK_OPENAI_KEY="sk-bench-0123456789")
        agent = CodexAgent("gpt-5.5", max_stop_blocks=0, cli_path=CODEX)
        inner = agent._answer

        async def timed(host: Any, msg: dict[str, Any]) -> None:
            if msg.get("method") == "item/fileChange/requestApproval":
                marks.asked.append(time.perf_counter())
            await inner(host, msg)

        agent._answer = timed  # type: ignore[method-assign]
        store = Store(tmp / "bench.db")
        config = SessionConfig(project=project, target="cpu", reference_command="true",
                               candidate_command="true", reference_runs=1, agent=agent,
                               policy="ask", mode="live", isolate=True, workdir=tmp / "w")
        ms = await paint_cards(SessionEngine(config, store.recorder), n, marks)
        store.close()
    if not ms:
        print(f"FAIL: not every one of {n} cards was painted; server errors: {api.errors}")
    return ms


async def main(n: int, alone: bool) -> int:
    if CODEX is None:
        print("SKIP: the Codex CLI is not installed (npm install @openai/codex; "
              "PORTSIDE_CODEX_CLI)")
        return 0
    say_load()
    codex = await codex_cards(n)
    ok = bool(codex) and report("codex", "fileChange approval request",
                                "apply_patch reply sent", codex)
    if alone:
        return 0 if ok else 1
    from tests.bench.bench_claude_code_card import claude_code_cards, report_claude_code

    cc = await claude_code_cards(n)
    cc_ok = report_claude_code(cc)
    if codex and cc:
        a, b = p95(codex["request"]), p95(cc["request"])
        print(f"codex / claude-code, permission request -> card p95: {a:.1f} / {b:.1f} ms = "
              f"{a / max(b, 1e-9):.2f}x")
    return 0 if ok and cc_ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edits", type=int, default=30)
    parser.add_argument("--alone", action="store_true", help="Codex only, no Claude Code run")
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.edits, args.alone)))
