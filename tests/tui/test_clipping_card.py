"""The central moment (issue 27 item 1): the demo's clipping edit arrives with its title and risk
marks in view and its diff opened on the marked line; `j`/`J` scroll the diff, `]`/`[` step
between its hunks and then on to the next card. Ground truth is the edit's own text: the line
`max_norm=0.05` sits on, found in the after-file, not in any widget."""

from __future__ import annotations

import re
from typing import Any

from conftest import FROZEN
from demo_edits import demo_edits
from doubles import MemorySink
from scenario import INFO, SID, at, session_start
from screen_text import screen_text

from portside.core.log import events as ev
from portside.core.log.bus import EventBus
from portside.core.session.review import ReviewGate
from portside.tui.app import make_app
from portside.tui.widgets.agent_column import AgentColumn
from portside.tui.widgets.diff_card import DiffCard

CHANGED = "max_norm=0.05"


def _session(upto: int = 3) -> tuple[list[ev.Event], ev.EditProposed]:
    """Edits 1..upto-1 approved and applied, edit `upto` awaiting the reviewer."""
    edits = demo_edits(SID, at(10))
    out: list[ev.Event] = [session_start(), ev.AgentText(session_id=SID, ts=at(1), text=(
        "The CUDA-specific pieces are the device string, float16 autocast with a GradScaler, "
        "and cudnn.benchmark. ") * 3)]
    for e in edits[: upto - 1]:
        out += [e, ev.EditDecided(session_id=SID, ts=e.ts + 0.5, edit_id=e.edit_id,
                                  decision="approved"),
                ev.EditApplied(session_id=SID, ts=e.ts + 0.6, edit_id=e.edit_id, path=e.path),
                ev.AgentText(session_id=SID, ts=e.ts + 0.7, text="Next, the training step.")]
    out.append(edits[upto - 1])
    return out, edits[upto - 1]


def _app(events: list[ev.Event]) -> Any:
    sink = MemorySink()
    history = [sink.append(e) for e in events]
    bus = EventBus(sink)
    return make_app(bus=bus, gate=ReviewGate(bus, SID, reviewer="t"), info=dict(INFO),
                    history=history, clock=lambda: FROZEN)


def _changed_row_text(edit: ev.EditProposed) -> str:
    line = next(i for i, text in enumerate(edit.after.splitlines(), 1) if CHANGED in text)
    assert any(m.line == line for m in edit.risks)  # the clipping mark points at it
    return edit.after.splitlines()[line - 1].strip()


def _shows(rows: list[str], line: str) -> bool:
    """`line` is in view, whole: a wrapped line's next rows start with ↪ under its gutter."""
    return line in re.sub(r" *\n *↪ ", "", "\n".join(rows))


async def _settle(pilot: Any) -> None:
    for _ in range(4):
        await pilot.pause()


async def test_clipping_card_opens_on_its_title_marks_and_changed_line() -> None:
    events, clip = _session()
    assert clip.path == "train.py" and CHANGED in clip.after
    changed = _changed_row_text(clip)
    app = _app(events)
    async with app.run_test(size=(120, 40)) as pilot:
        await _settle(pilot)
        text = screen_text(app)
        card = app.live.query_one(AgentColumn).cards["e3"]
        assert isinstance(card, DiffCard)
        shown = card.body.visible_text()
        # The card's title and the clipping mark are on screen without a key ...
        assert "edit 3" in text and "train.py" in text, text
        assert "max_norm args.max_norm → 0.05" in text, text
        # ... and so is the changed line, inside the diff's own scroll area.
        assert _shows(shown, changed), shown
        assert card.body.scroll_y > 0  # it had to open past the first hunk to show it


async def test_keys_scroll_the_diff_and_step_hunks() -> None:
    events, clip = _session()
    changed = _changed_row_text(clip)
    app = _app(events)
    async with app.run_test(size=(120, 40)) as pilot:
        await _settle(pilot)
        body = app.live.query_one(AgentColumn).cards["e3"].body  # type: ignore[union-attr]
        opened = body.scroll_y
        await pilot.press("J", "J", "ctrl+up")
        await _settle(pilot)
        assert body.scroll_y == opened - 3
        await pilot.press("j", "ctrl+down")
        await _settle(pilot)
        assert body.scroll_y == opened - 1
        stops = len(body.wrapped().stops) + len(clip.risks)
        while body.scroll_y > 0:  # `[` back to the top of the hunk ...
            await pilot.press("left_square_bracket")
            await _settle(pilot)
        assert app.live.current_edit == "e3" and not _shows(body.visible_text(), changed)
        for _ in range(stops):  # ... `]` (hunks, marked lines) until the changed line is in view
            if _shows(body.visible_text(), changed):
                break
            await pilot.press("right_square_bracket")
            await _settle(pilot)
        assert _shows(body.visible_text(), changed), body.visible_text()
        assert app.live.current_edit == "e3"


async def test_help_lists_the_diff_keys() -> None:
    events, _ = _session()
    app = _app(events)
    async with app.run_test(size=(120, 40)) as pilot:
        await _settle(pilot)
        await pilot.press("question_mark")
        await _settle(pilot)
        first = screen_text(app)
        await pilot.press("end")  # the list scrolls, and says so
        await _settle(pilot)
        text = first + screen_text(app)
    assert "↓ more keys below" in first, first
    assert "Diff down" in text and "Next hunk" in text and "j, ctrl+down" in text, text
