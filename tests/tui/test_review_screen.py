"""The reviewer's screen: risk marks on the card, the alarm that names the edit behind it, the
failure bar that stays until dismissed, the Agent column that widens while an edit awaits."""

from __future__ import annotations

from typing import Any

from conftest import FROZEN, until
from doubles import MemorySink
from scenario import INFO, SID, TRAIN_AFTER, TRAIN_BEFORE, at, clipping_alarm, edit, session_start
from screen_text import screen_text
from textual.widgets import Static

from portside.core.log import events as ev
from portside.core.log.bus import EventBus
from portside.core.session.review import ReviewGate
from portside.core.workspace.risk import scan
from portside.tui.app import make_app
from portside.tui.screens import review as review_screen
from portside.tui.widgets.checks import ChecksPanel


def _app(events: list[ev.Event], engine_run: Any = None) -> Any:
    sink = MemorySink()
    history = [sink.append(e) for e in events]
    bus = EventBus(sink)
    return make_app(bus=bus, gate=ReviewGate(bus, SID, reviewer="t"), info=dict(INFO),
                    history=history, clock=lambda: FROZEN, engine_run=engine_run)


def _marked_edit() -> ev.EditProposed:
    e = edit()
    e.risks = scan(TRAIN_BEFORE, TRAIN_AFTER)
    return e


class TestRiskMarks:
    async def test_card_shows_marks_and_the_alarm_names_the_applied_edit(self) -> None:
        events = [session_start(), _marked_edit(),
                  ev.EditDecided(session_id=SID, ts=at(6), edit_id="e1", decision="approved"),
                  ev.EditApplied(session_id=SID, ts=at(6), edit_id="e1", path="train.py"),
                  clipping_alarm()]
        app = _app(events)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            app.live.query_one(ChecksPanel).select("a-clip")
            app.live.flush()
            await pilot.pause()
            text = screen_text(app)
            marks = str(app.live.query_one(".card-risks", Static).render())
        assert "⚠ touches gradient clipping: max_norm 1.0 → 0.05  (line 13)" in marks
        assert "⚠ gradient clipping now runs before xm.optimizer_step" in marks
        assert "← edit train.py (e1) carried:" in text, text  # the Checks column names the edit

    async def test_no_link_to_an_edit_that_was_not_applied(self) -> None:
        events = [session_start(), _marked_edit(),
                  ev.EditDecided(session_id=SID, ts=at(6), edit_id="e1", decision="rejected"),
                  clipping_alarm()]
        app = _app(events)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            app.live.query_one(ChecksPanel).select("a-clip")
            await pilot.pause()
            assert "← edit" not in screen_text(app)


class TestLayout:
    async def test_agent_column_widens_while_an_edit_awaits(self, monkeypatch: Any) -> None:
        # Wide while the edit awaits; still wide right after the decision and when the next
        # edit comes (each flip re-lays out every column: it made a card take ~0.9 s to reach
        # the screen); narrow once no edit has awaited for REVIEW_HOLD_S.
        monkeypatch.setattr(review_screen, "REVIEW_HOLD_S", 0.5)
        app = _app([session_start(), _marked_edit()])
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            width = lambda: app.live.query_one("#agent-col").size.width  # noqa: E731
            wide = width()
            app.live.apply([ev.EditDecided(session_id=SID, ts=at(7), edit_id="e1",
                                           decision="approved", seq=99)])
            await pilot.pause()
            held = width()
            app.live.apply([edit("e2")])
            await pilot.pause()
            again = width()
            app.live.apply([ev.EditDecided(session_id=SID, ts=at(8), edit_id="e2",
                                           decision="approved", seq=101)])
            await until(pilot, lambda: width() < 60)  # narrows back at a later tick
            narrow = width()
        assert wide == held == again >= 60 > narrow, (wide, held, again, narrow)


class TestFailure:
    async def test_engine_failure_stays_until_dismissed(self) -> None:
        async def failing() -> None:
            raise RuntimeError("workspace root /x/work is inside the project /x")

        app = _app([session_start()], engine_run=failing)
        async with app.run_test(size=(120, 40)) as pilot:
            # The header's state and the failure bar change in one handler, but the bar's
            # first display needs a layout the header's repaint does not wait for: wait for
            # the bar itself (CI once read the header alone).
            await until(pilot, lambda: "engine failed:" in screen_text(app))
            text = screen_text(app)
            assert "engine failed: RuntimeError: workspace root /x/work is inside" in text
            assert "d dismisses" in text
            app.clear_notifications()  # a toast is not what keeps it on screen
            await pilot.pause()
            assert "d dismisses" in screen_text(app)
            await pilot.press("d")
            await pilot.pause()
            assert "d dismisses" not in screen_text(app)
