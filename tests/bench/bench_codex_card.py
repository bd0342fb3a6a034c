"""Permission request -> diff card ON SCREEN, for a real Codex session on the live screen.

    .venv/bin/python tests/bench/bench_codex_card.py [--edits 30]

The real Codex CLI (PORTSIDE_CODEX_CLI or `codex` on PATH) through `codex app-server`, a
loopback Responses API (tests/loopback_responses.py) that asks for N patches in a row, the real
engine and gate (policy ask), and the live app (120x40, headless Textual, engine as its worker,
as `portside run --agent codex` does). For each patch, two latencies until the app writes the
card's title (``edit i/i train.py``) to the terminal:

- from Codex's ``item/fileChange/requestApproval`` reaching portside (the request is read);
- from the loopback server handing over the apply_patch reply (adds Codex parsing it).

The terminal bytes are rendered from each compositor update (tests/bench/bench_tui_flood.py's
PaintLog), so the paint cost is in the figures. The reviewer approves each card once painted
(not timed). Target, as for Claude Code: p95 < 200 ms, printed as a TARGET line. Skips (exit
0, says so) where the Codex CLI is not installed. Not collected by pytest.
"""

from __future__ import annotations

import argparse
import asyncio
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
from codex_cli import CODEX  # noqa: E402
from loopback_responses import LoopbackResponses, codex_home, message, patch  # noqa: E402

from portside.core.codex.live import CodexAgent  # noqa: E402
from portside.core.log import events as ev  # noqa: E402
from portside.core.session.engine import SessionConfig, SessionEngine  # noqa: E402
from portside.store import Store  # noqa: E402
from portside.tui.app import make_app  # noqa: E402

CSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
TARGET_MS = 200.0


def _p95(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[int(0.95 * (len(xs) - 1))]


async def main(n: int) -> int:
    if CODEX is None:
        print("SKIP: the Codex CLI is not installed (npm install @openai/codex; "
              "PORTSIDE_CODEX_CLI)")
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="bench-codex-card-"))
    project = tmp / "project"
    project.mkdir()
    (project / "train.py").write_text("# v0\nprint('train')\n")
    sent: dict[int, float] = {}
    asked: list[float] = []  # fileChange approval requests read, in order (one per patch)

    def edit(i: int) -> Any:
        def step(body: dict[str, Any]) -> list[dict[str, Any]]:
            sent[i] = time.perf_counter()
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
                asked.append(time.perf_counter())
            await inner(host, msg)

        agent._answer = timed  # type: ignore[method-assign]
        store = Store(tmp / "bench.db")
        config = SessionConfig(project=project, target="cpu", reference_command="true",
                               candidate_command="true", reference_runs=1, agent=agent,
                               policy="ask", mode="live", isolate=True, workdir=tmp / "w")
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
                if pending and len(painted) > len(answered):
                    answered.append(pending[0].item_id)
                    gate.approve(pending[0].item_id)
                if gate.pending_claim() is not None:
                    gate.verdict("pass", "bench")
                await asyncio.sleep(0.002)
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
    for name, xs in (("fileChange approval request -> diff card painted", from_hook),
                     ("apply_patch reply sent -> diff card painted", from_reply),
                     ("(part) approval request -> edit.proposed on the bus", to_bus),
                     ("(part) edit.proposed on the bus -> diff card painted", bus_paint)):
        print(f"codex {name}, {len(xs)} edits: p50 {statistics.median(xs):.1f} ms, "
              f"p95 {_p95(xs):.1f} ms, max {max(xs):.1f} ms")
    if os.environ.get("BENCH_VERBOSE"):
        print("bus -> paint per edit (ms):", " ".join(f"{x:.0f}" for x in bus_paint))
    ok = _p95(from_hook) < TARGET_MS
    print(f"TARGET codex permission request -> card on screen p95 {_p95(from_hook):.1f} ms "
          f"< {TARGET_MS:.0f} ms: " + ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


async def side_by_side(n: int) -> int:
    """Codex, then Claude Code's bench (tests/bench/bench_claude_code_card.py) in the same run,
    so the ratio holds whatever the machine's load."""
    import contextlib
    import io

    from bench_claude_code_card import main as cc_main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = await main(n)
    out = buf.getvalue()
    print(out, end="")
    if CODEX is None:
        return rc
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        await cc_main(n)
    cc = buf.getvalue()
    print(cc, end="")
    pick = re.compile(r"request -> diff card painted, \d+ edits: .*?p95 ([0-9.]+) ms")
    mine, theirs = pick.search(out), pick.search(cc)
    if mine and theirs:
        print(f"codex / claude-code, permission request -> card p95: {float(mine.group(1)):.1f} "
              f"/ {float(theirs.group(1)):.1f} ms = "
              f"{float(mine.group(1)) / max(float(theirs.group(1)), 1e-9):.2f}x")
    return rc


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edits", type=int, default=30)
    parser.add_argument("--alone", action="store_true", help="Codex only, no Claude Code run")
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.edits) if args.alone else side_by_side(args.edits)))
