"""The Checks panel's hardware lines and the wrong-hardware check answer with one rule: a correct
XLA:CPU candidate (what tests/xla/test_xla.py sees torch_xla 2.9 report: backend torch_xla,
device_kind CPU, real_devices [CPU:0]) carries no ✖ for target xla or xla:cpu."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import FROZEN
from doubles import MemorySink
from scenario import SID, at, run_started, session_start, steps
from textual.widgets import Static

from portside.core.checks.records.comparison import Comparison
from portside.core.checks.records.records import RunRecords
from portside.core.checks.runtime import check_hardware
from portside.core.log import events as ev
from portside.core.log.bus import EventBus
from portside.core.log.criteria import Criteria
from portside.core.session.review import ReviewGate
from portside.tui.app import make_app

XLA_CPU = {"type": "facts", "backend": "torch_xla", "device_kind": "CPU", "device_name": "CPU:0",
           "device_count": 1, "real_devices": ["CPU:0"]}
PLAIN_CPU = {"type": "facts", "backend": "cpu", "device_kind": "CPU", "device_name": "CPU:0",
             "device_count": 1}


async def _hardware_text(target: str, cand_facts: dict[str, Any]) -> str:
    start = session_start()
    start.target = target
    events: list[ev.Event] = [
        start, run_started("ref-1", "reference", 1, 6),
        ev.RunRecord(session_id=SID, ts=at(7), run_id="ref-1", records=[dict(PLAIN_CPU)]),
        steps("ref-1", 5, dt=8), run_started("cand-1", "candidate", 1, 13),
        ev.RunRecord(session_id=SID, ts=at(14), run_id="cand-1", records=[dict(cand_facts)]),
        steps("cand-1", 5, dt=15)]
    sink = MemorySink()
    history = [sink.append(e) for e in events]
    bus = EventBus(sink)
    info = {"project": "/p", "target": target, "agent": "scripted:x", "mode": "live",
            "title": "p", "criteria": {}}
    app = make_app(bus=bus, gate=ReviewGate(bus, SID, reviewer="t"), info=info, history=history,
                   clock=lambda: FROZEN)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        app.live.flush()
        await pilot.pause()
        return str(app.live.query_one("#hardware", Static).render())


def _check_errors(target: str, facts: dict[str, Any]) -> list[str]:
    recs = RunRecords.from_records([facts, *steps("cand-1", 5).records])
    return [a.kind for a in check_hardware(Comparison([], recs, True, target),
                                           Criteria()) if a.is_error]


@pytest.mark.parametrize("target", ["xla", "xla:cpu"])
async def test_correct_xla_cpu_candidate_has_no_cross(target: str) -> None:
    assert _check_errors(target, XLA_CPU) == []  # the check passes it ...
    text = await _hardware_text(target, XLA_CPU)
    cand = next(line for line in text.splitlines() if "cand" in line)
    assert "torch_xla" in cand and "✓" in cand and "✖" not in text, text  # ... and so does the view


async def test_plain_cpu_candidate_for_xla_is_crossed() -> None:
    assert _check_errors("xla", PLAIN_CPU) == ["wrong-hardware"]
    text = await _hardware_text("xla", PLAIN_CPU)
    cand = next(line for line in text.splitlines() if "cand" in line)
    assert "✖ want xla" in cand, text
