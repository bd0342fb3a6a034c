"""The project's portability scan on the live screen: one ``project.scanned`` event (a real
scan of a fixture project) becomes a card at the top of the Agent column, readable at 120x40
by keyboard alone (z zooms the column). Ground truth: the fixture's hand-checked EXPECTED."""

from __future__ import annotations

from pathlib import Path

from conftest import until
from scenario import SID, session_start
from screen_text import screen_text

from portside.core.scan.scan import scan
from portside.tui.widgets.scan_card import ScanCard

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "scan"
PROJECT = "time_sequence_prediction"


def expected() -> list[tuple[str, str]]:
    """(path:line, kind) of the project's findings, from the hand-checked list."""
    rows = [ln.split()[:2] for ln in (FIXTURES / "EXPECTED").read_text().splitlines()
            if ln.startswith(PROJECT + "/")]
    return [(where.removeprefix(PROJECT + "/"), kind) for where, kind in rows]


async def test_scan_card_lists_each_place_and_what_to_do(harness):
    want = expected()
    assert len(want) == 7
    app = harness.app()
    async with app.run_test(size=(120, 40)) as pilot:
        harness.bus.publish(session_start())
        harness.bus.publish(scan(FIXTURES / PROJECT).to_event(SID))
        await until(pilot, lambda: app.screen.query(ScanCard))
        await pilot.pause(0.2)
        text = screen_text(app)
        assert "⌕ portability scan" in text
        assert "7 place(s)" in text and " train.py:20 torch.double" in text  # narrow, wrapped
        await pilot.press("z")  # the Agent column (focused from the start) at full width
        await pilot.pause(0.3)
        zoomed = screen_text(app)
        assert "7 place(s) will not move as they are (2 file(s) scanned)" in zoomed
        assert "float64 5 · recompile 2" in zoomed
        for where, _kind in want:
            assert f" {where} " in zoomed, (where, zoomed)
        # each kind's action once, above its places
        assert zoomed.count("float64 — float64: TPUs have no native float64") == 1
        assert zoomed.count("recompile — host sync in the step") == 1
        await pilot.press("z")


async def test_scan_card_without_an_agent_names_no_agent_task() -> None:
    """Issue 41 item 11: verification only, the card said "the agent's task holds the same
    list" (there is no agent, and no task)."""
    from conftest import FROZEN
    from doubles import MemorySink
    from screen_text import screen_lines

    from portside.core.log.bus import EventBus
    from portside.core.session.review import ReviewGate
    from portside.tui.app import make_app


    start = session_start()
    start.agent = "none"
    sink = MemorySink()
    history = [sink.append(e) for e in (start, scan(FIXTURES / PROJECT).to_event(SID))]
    bus = EventBus(sink)
    info = {"project": "/p/tsp", "target": "tpu", "agent": "none", "mode": "live",
            "title": "tsp", "criteria": {}}
    app = make_app(bus=bus, gate=ReviewGate(bus, SID, reviewer="t"), info=info,
                   history=history, clock=lambda: FROZEN)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.screen.query(ScanCard))
        await pilot.press("z")
        await pilot.pause(0.3)
        text = "\n".join(screen_lines(app))
        assert "7 place(s)" in text
        assert "agent's task" not in text and "`portside scan` prints the same list" in text, text
