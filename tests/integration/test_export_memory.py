"""An events export's peak memory stays flat as the log grows (fresh `portside export`
processes at 50k and 200k events, to a file and to a terminal): a memory test, so slow."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest


@pytest.mark.slow
def test_events_export_memory_is_flat(tmp_path: Path) -> None:
    """Peak RSS of `portside export` (fresh processes) at 50k and 200k events: flat, to a file
    and to a terminal (which buffered the whole recording before: +75 MB here)."""
    from tests.bench import bench_export as bench  # the bench's generator and measure

    rss: dict[str, list[float]] = {"file": [], "tty": []}
    for n in (50_000, 200_000):
        db = tmp_path / f"{n}.db"
        bench.make_session(db, n)
        with sqlite3.connect(db) as conn:  # the generator made what it says
            assert conn.execute("SELECT COUNT(*) FROM events").fetchone()[0] == n
        for how in rss:
            out = tmp_path / "out.jsonl"
            rss[how].append(bench.export_rss(db, bench.SID, how, out)[0])
            if how == "file":
                assert sum(1 for _ in out.open("rb")) == n + 1  # header + every event
    for how, (small, big) in rss.items():
        assert big < small * 1.1 + 4, (how, rss)
