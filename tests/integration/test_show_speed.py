"""`portside show` of a long session costs a constant, small time per event (a 99k-line
transcript took 116 s: rich's print measured, wrapped and flushed every line)."""

from __future__ import annotations

import time
from pathlib import Path

from cli_run import cli

from portside.core.log import events as ev
from portside.store import Store

EVENTS = 30_000


def _session(db: Path) -> None:
    with Store(db) as store:
        rec = store.recorder
        rec.append(ev.SessionStarted(session_id="long-1", project="/x/p", target="tpu"))
        for i in range(EVENTS):
            rec.append(ev.AgentText(session_id="long-1", text=f"looking at file {i} " * 4))
        rec.flush()


def _show(db: Path, *extra: str) -> tuple[float, str]:
    t0 = time.perf_counter()
    out = cli("show", "long-1", *extra, db=db)
    assert out.returncode == 0, out.stderr[-2000:]
    return time.perf_counter() - t0, out.stdout


def test_show_costs_little_per_event(tmp_path: Path) -> None:
    db = tmp_path / "long.db"
    _session(db)
    fixed, _ = _show(db, "--limit", "1")  # start-up, the summary: the same in both
    whole, text = _show(db)
    lines = text.splitlines()
    assert sum("agent: looking at file" in line for line in lines) == EVENTS
    assert f"agent: looking at file {EVENTS - 1} " in lines[-1]  # one line each, unwrapped
    per_event_ms = (whole - fixed) / EVENTS * 1000
    # Before: 0.3 ms an event on a 2-core machine (9.9 s for 30k); now about 0.015 ms.
    assert per_event_ms < 0.1, f"{per_event_ms:.3f} ms per event ({whole:.1f} s in all)"
