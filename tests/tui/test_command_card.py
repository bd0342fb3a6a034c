"""A command proposal on the live screen: its own card ("command i/N", numbered apart from the
edits), answered with the same keys; the intervention is on disk; an older log's `$ cwd` edit
form shows as a command card too."""

from __future__ import annotations

from conftest import Harness, until
from scenario import SID, at, edit, session_start
from screen_text import screen_text
from textual.widgets import TextArea

from portside.core.log import events as ev
from portside.core.session.review import Decision
from portside.tui.screens.review import ReviewScreen
from portside.tui.widgets.command_card import CommandCard
from portside.tui.widgets.diff_card import DiffCard


class CommandEngine:
    """Proposes an edit (approved by policy) and then a command, and waits for the reviewer."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.decision: Decision | None = None

    async def run(self) -> None:
        self.h.bus.publish(session_start())
        self.h.bus.publish(edit())
        self.h.bus.publish(ev.EditDecided(session_id=SID, ts=at(6), edit_id="e1",
                                          decision="approved", by="policy"))
        proposed = self.h.bus.publish(ev.CommandProposed(
            session_id=SID, ts=at(7), command_id="cmd-1", command="python -m pytest -q",
            cwd="tests", description="run the unit tests"))
        assert isinstance(proposed, ev.CommandProposed)
        self.decision = await self.h.gate.review_command(proposed)


async def _pending(h: Harness, pilot: object) -> None:
    await until(pilot, lambda: h.gate.pending_edits() and isinstance(pilot.app.screen, ReviewScreen)  # type: ignore[attr-defined]
                and "cmd-1" in pilot.app.screen._shown_at)  # type: ignore[attr-defined]
    # The screen's next tick tells the gate when the card was first shown.
    await until(pilot, lambda: all(p.shown_at is not None for p in h.gate.pending_edits()))
    # Laid out (on a loaded machine the first layout can come after the gate heard of it).
    await until(pilot, lambda: all(c.outer_size.height for c in pilot.app.screen.query(  # type: ignore[attr-defined]
        ".diff-card")))


async def test_command_card_approved_with_a(harness: Harness) -> None:
    engine = CommandEngine(harness)
    app = harness.app(engine.run)
    async with app.run_test(size=(120, 40)) as pilot:
        await _pending(harness, pilot)
        text = screen_text(app)
        cards = app.live.query_one("AgentColumn").cards  # type: ignore[attr-defined]
        assert isinstance(cards["cmd-1"], CommandCard) and isinstance(cards["e1"], DiffCard)
        assert "command 1 python -m pytest -q" in text and "edit 1 " in text, text
        assert "edit 1 of" not in text and "edit 2" not in text  # numbered apart
        assert "in tests · run the unit tests" in text
        await pilot.press("a")
        await until(pilot, lambda: engine.decision is not None)
    assert engine.decision is not None and engine.decision.action == "approve"
    rows = harness.interventions()
    assert [(r["action"], r["target_id"]) for r in rows] == [("approve", "cmd-1")]
    assert rows[0]["attention_started_at"] <= rows[0]["decided_at"]


async def test_command_edited_with_e_sends_the_new_command(harness: Harness) -> None:
    engine = CommandEngine(harness)
    app = harness.app(engine.run)
    async with app.run_test(size=(120, 40)) as pilot:
        await _pending(harness, pilot)
        await pilot.press("e")
        await until(pilot, lambda: bool(app.screen.query(TextArea)))
        area = app.screen.query_one(TextArea)
        assert area.text == "python -m pytest -q"
        area.text = "python -m pytest -q -x"
        await pilot.press("ctrl+s")
        await until(pilot, lambda: engine.decision is not None)
    assert engine.decision is not None and engine.decision.after == "python -m pytest -q -x"
    assert [r["action"] for r in harness.interventions()] == ["edit"]


async def test_an_older_logs_command_shows_as_a_command_card(harness: Harness) -> None:
    legacy = ev.EditProposed(session_id=SID, ts=at(7), seq=3, edit_id="cmd-old", path="$ .",
                             before="", after="ls -la", rationale="look around")
    app = harness.app(history=[session_start(), edit(), legacy])
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        app.live.flush()
        await pilot.pause()
        text = screen_text(app)
    assert "command 1 ls -la" in text and "edit 1 " in text, text
