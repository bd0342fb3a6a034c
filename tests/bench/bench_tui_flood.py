"""Flood benchmark: a run printing 20k lines/s for 10 s while the reviewer presses keys.

    .venv/bin/python -m tests.bench.bench_tui_flood [--rate 20000] [--seconds 10] [--held N]

``--held N`` first fills the log with N lines (through the same bus, store and fold, in bounded
batches), so the flood and the keys are measured with that many lines held: issue 19's target
is RSS ≤ 300 MB and key p95 < 50 ms at 10M lines.

A thread publishes run.output events (batches every 10 ms) through a real EventBus into a real
SQLite store, as the runner does; meanwhile keys are sent to the app through its driver: `space` (pause/resume: a gate call
with a durable write, then the header changes) and `s` (diff card unified/side-by-side, a pure
view change). Latency is from the key event until the app writes the change to its terminal. Prints
p50/p95 latency and peak RSS. Targets: p95 < 100 ms, RSS < 300 MB. Not collected by pytest.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from textual import events
from textual._compositor import CompositorUpdate
from textual.app import App

from portside.core.log import events as ev
from portside.core.log.bus import EventBus
from portside.core.session.review import ReviewGate
from portside.store import Store
from portside.tui.app import make_app
from tests.scenario import INFO, SID, edit, run_started, session_start, train_lines
from tests.screen_text import screen_lines


def send_key(app: App, key: str, char: str | None) -> None:
    """Deliver a key the way the terminal driver does. Pilot.press is not used for timing: it
    waits for the process to go CPU-idle (up to a second), which a flood never allows."""
    event = events.Key(key, char)
    event.set_sender(app)
    app._driver.send_message(event)  # type: ignore[union-attr]


class PaintLog:
    """Records what the app would write to a terminal, and when. Headless, Textual skips the
    write; this renders each compositor update to terminal bytes as a real terminal run would
    (so that cost is in the figures too)."""

    def __init__(self, app: App) -> None:
        self.writes: list[tuple[float, str]] = []
        original = app._display

        def display(screen: object, renderable: object) -> None:
            if isinstance(renderable, CompositorUpdate):
                data = renderable.render_segments(app.console)
                self.writes.append((time.perf_counter(), data))
            original(screen, renderable)  # type: ignore[arg-type]

        app._display = display  # type: ignore[method-assign]

    async def key_to_paint(self, app: App, key: str, char: str | None, marker: str) -> float:
        """Seconds from sending ``key`` until a write to the terminal contains ``marker``."""
        start = len(self.writes)
        t0 = time.perf_counter()
        send_key(app, key, char)
        while True:
            for t, data in self.writes[start:]:
                if marker in data:
                    return t - t0
            start = max(start, len(self.writes) - 1)
            if time.perf_counter() - t0 > 10:
                raise TimeoutError(f"{key}: {marker!r} never painted")
            await asyncio.sleep(0.001)


def screen_text_now(app: App) -> str:
    return "\n".join(screen_lines(app))


def flood(bus: EventBus, rate: int, seconds: float, stop: threading.Event,
          sent: list[int]) -> None:
    batch = max(1, rate // 100)  # every 10 ms, like the runner's batching
    lines = train_lines(batch)
    t0 = time.perf_counter()
    n = 0
    while not stop.is_set():
        due = t0 + n * 0.01
        now = time.perf_counter()
        if due > now:
            time.sleep(due - now)
        if time.perf_counter() - t0 >= seconds:
            break
        bus.publish(ev.RunOutput(session_id=SID, run_id="cand-1", lines=lines))
        n += 1
        sent[0] += batch


async def prefill(app: App, bus: EventBus, pilot: object, held: int) -> float:
    """Publish ``held`` lines in batches, never more than a few batches ahead of the fold."""
    block = train_lines(5000)
    run = app.live.model.runs["cand-1"]  # type: ignore[attr-defined]
    t0 = time.perf_counter()
    sent = 0
    while sent < held:
        n = min(len(block), held - sent)
        bus.publish(ev.RunOutput(session_id=SID, run_id="cand-1", lines=block[:n]))
        sent += n
        while len(run.lines) < sent - 4 * len(block):
            await asyncio.sleep(0.005)
    while len(run.lines) < sent:
        await asyncio.sleep(0.01)
    return time.perf_counter() - t0


async def main(rate: int, seconds: float, held: int = 0) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "bench.db")
        bus = EventBus(store.recorder)
        gate = ReviewGate(bus, SID, reviewer="bench")
        app = make_app(bus=bus, gate=gate, info=dict(INFO))
        lat: dict[str, list[float]] = {"space": [], "s": []}
        sent = [0]
        async with app.run_test(size=(120, 40)) as pilot:
            for e in (session_start(), edit(), run_started("cand-1", "candidate", 1, 1)):
                bus.publish(e)
            await pilot.pause(0.3)
            if held:
                took = await prefill(app, bus, pilot, held)
                print(f"held: {held:,} lines folded in {took:.1f} s before the flood")
                sent[0] += held
            stop = threading.Event()
            thread = threading.Thread(target=flood, args=(bus, rate, seconds, stop, sent))
            t_start = time.perf_counter()
            thread.start()
            writes = PaintLog(app)
            while time.perf_counter() - t_start < seconds:
                # space: the header says "paused" / "running" once the gate call is on disk.
                want = "paused" if not gate.paused else "running"
                lat["space"].append(await writes.key_to_paint(app, "space", " ", want))
                # s: the diff card flips between unified and side by side.
                want = "@@ +1,5" if "@@ -1,4 +1,5 @@" in screen_text_now(app) else "@@ -1,4 +1,5"
                lat["s"].append(await writes.key_to_paint(app, "s", "s", want))
                await asyncio.sleep(0.1)
            stop.set()
            thread.join()
            await pilot.pause(0.5)
            shown = len(app.live.model.runs["cand-1"].lines)
        store.close()
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    every = sorted(lat["space"] + lat["s"])
    p50 = statistics.median(every) * 1e3
    p95 = every[int(0.95 * (len(every) - 1))] * 1e3
    flooded = sent[0] - held
    print(f"flood: {flooded:,} lines in {seconds:g} s ({flooded / seconds:,.0f} lines/s), "
          f"{shown:,} lines held by the UI")
    for key, vals in lat.items():
        vals = sorted(vals)
        print(f"  key {key!r:8} n={len(vals):3} p50 {statistics.median(vals) * 1e3:6.1f} ms  "
              f"p95 {vals[int(0.95 * (len(vals) - 1))] * 1e3:6.1f} ms  "
              f"max {vals[-1] * 1e3:6.1f} ms")
    print(f"key→screen latency: p50 {p50:.1f} ms, p95 {p95:.1f} ms (target < 100 ms)")
    print(f"peak RSS: {peak_mb:.0f} MB (target < 300 MB)")
    ok = p95 < 100 and peak_mb < 300 and shown == sent[0]
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=20_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--held", type=int, default=0, help="lines in the log before the flood")
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.rate, args.seconds, args.held)))
