"""The timing loop the permission-request -> card benchmarks share (bench_claude_code_card.py,
bench_codex_card.py): a real engine with a real agent CLI under the live app (120x40, headless
Textual, the engine as its worker), every compositor update rendered to terminal bytes
(bench_tui_flood.py's PaintLog), each card's title found in them, the reviewer approving a card
once it is painted (not timed). Not collected by pytest."""

from __future__ import annotations

import asyncio
import os
import re
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from portside.core.log import events as ev
from portside.tui.app import make_app
from tests.bench.bench_tui_flood import PaintLog

CSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
TARGET_MS = 200.0


def p95(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[int(0.95 * (len(xs) - 1))]


def say_load() -> None:
    """The machine is shared: the figures are read with its load beside them."""
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} "
          f"on {os.cpu_count()} cores")


def card_title(i: int, path: str = "train.py") -> str:
    """The newest card's title as the screen writes it (tui/widgets/proposal_card.py)."""
    return f"edit {i + 1}" + (f" · {i} before" if i else "") + f" {path}"


@dataclass
class Marks:
    """perf_counter stamps, one per edit in order: the agent's request read by portside
    (``asked``), the model's reply handed over (``sent``, by edit index)."""

    asked: list[float] = field(default_factory=list)
    sent: dict[int, float] = field(default_factory=dict)


async def paint_cards(engine: Any, n: int, marks: Marks) -> dict[str, list[float]]:
    """Run ``engine`` under the live app until ``n`` cards are painted (or a deadline); the
    latencies in ms, or {} when not every card was painted."""
    app = make_app(bus=engine.bus, gate=engine.gate, info=engine.info, engine_run=engine.run,
                   engine_stop=lambda: engine.stop("bench over"))
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
                    if card_title(i) in plain:
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
    if len(painted) < n:
        return {}
    asked, sent = marks.asked, marks.sent
    return {
        "request": [(painted[i] - asked[i]) * 1e3 for i in range(n) if i < len(asked)],
        "reply": [(painted[i] - sent[i]) * 1e3 for i in range(n) if i in sent],
        "gate": [(on_bus[i] - asked[i]) * 1e3 for i in range(min(n, len(asked), len(on_bus)))],
        "screen": [(painted[i] - on_bus[i]) * 1e3 for i in range(min(n, len(on_bus)))],
    }


def report(agent: str, request: str, reply: str, ms: dict[str, list[float]]) -> bool:
    """Print the figures and the TARGET line; whether p95 request -> card is under target."""
    for name, xs in ((f"{request} -> diff card painted", ms["request"]),
                     (f"{reply} -> diff card painted", ms["reply"]),
                     (f"(part) {request} -> edit.proposed on the bus", ms["gate"]),
                     ("(part) edit.proposed on the bus -> diff card painted", ms["screen"])):
        print(f"{agent} {name}, {len(xs)} edits: p50 {statistics.median(xs):.1f} ms, "
              f"p95 {p95(xs):.1f} ms, max {max(xs):.1f} ms")
    got = p95(ms["request"])
    ok = got < TARGET_MS
    print(f"TARGET {agent} permission request -> card on screen p95 {got:.1f} ms "
          f"< {TARGET_MS:.0f} ms: " + ("PASS" if ok else "FAIL"))
    return ok
