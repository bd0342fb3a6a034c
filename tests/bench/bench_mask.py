"""Masking token-shaped strings (core/safety/secrets.py mask_event) on the events bench_ingest.py
stores, against what storing them costs (Recorder.append + commit), in the same process.
    python -m tests.bench.bench_mask [N]
Prints ns per event for each, best of three; the lines carry no secret (the common case), and
one line in 100 carries a GitHub token (the masked case)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from portside.core.log import events as ev
from portside.core.safety.secrets import mask_event
from tests.bench import bench_ingest

N = bench_ingest.N


def with_tokens(events: list[ev.Event]) -> list[ev.Event]:
    for i, e in enumerate(events):
        if i % 100 == 0 and isinstance(e, ev.RunOutput):
            e.lines = [e.lines[0] + " push https://x:ghp_" + "a" * 36 + "@github.com/o/r"]
    return events


def bench_mask(tokens: bool) -> float:
    events = bench_ingest.make_events("bench")
    if tokens:
        events = with_tokens(events)
    t0 = time.perf_counter_ns()
    for e in events:
        mask_event(e)
    return (time.perf_counter_ns() - t0) / N


def main() -> None:
    plain = min(bench_mask(False) for _ in range(3))
    masked = min(bench_mask(True) for _ in range(3))
    with tempfile.TemporaryDirectory() as d:
        store = min(1e9 / bench_ingest.bench_store(Path(d) / f"s{i}.db") for i in range(3))
    print(f"{N} events: mask {plain:.0f} ns/event (no secret), {masked:.0f} ns/event "
          f"(1 in 100 lines with a token); storing {store:.0f} ns/event: masking adds "
          f"{100 * plain / store:.0f}%")


if __name__ == "__main__":
    main()
