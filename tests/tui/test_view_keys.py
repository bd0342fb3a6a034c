"""The view keys: `/` log search, `f` whole file, `s` side by side, `[ ]` files, `z` zoom, and
`e` through $EDITOR; plus the two promises the flood benchmark relies on (no screen layout per
batch of log lines, none for `s`)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from conftest import Harness, type_text, until
from scenario import SID, TRAIN_AFTER, edit, output, run_started, session_start, train_lines
from screen_text import screen_lines
from textual.widgets import Input, TextArea

from portside.core.log import events as ev
from portside.tui.screens.dialogs import EditDialog
from portside.tui.screens.review import ReviewScreen
from portside.tui.widgets.diff_card import DiffBody, DiffCard
from portside.tui.widgets.log_view import MATCH_STYLE, LogView
from portside.tui.widgets.runs import RunsPanel

SIZE = (120, 40)


def _live(app: Any) -> ReviewScreen:
    screen = app.screen
    assert isinstance(screen, ReviewScreen)
    return screen


def _body(app: Any, edit_id: str = "e1") -> DiffBody:
    return _live(app).query_one(f"#card-{edit_id}", DiffCard).body


def _layout_counter(app: Any) -> list[object]:
    """Every screen layout from now on (Textual publishes this signal after each one)."""
    seen: list[object] = []
    app.screen.screen_layout_refresh_signal.subscribe(app, seen.append, immediate=True)
    return seen


# --- `/` search within a run log ------------------------------------------------------------


def _log_with_needles(n: int = 1000, at: tuple[int, ...] = (300, 700)) -> list[str]:
    lines = train_lines(n)
    for i in at:
        lines[i] = f"step {i}: needle in the log"
    return lines


class TestLogSearch:
    async def test_slash_finds_each_match_in_turn_and_escape_clears(self, harness: Harness
                                                                    ) -> None:
        app = harness.app()
        async with app.run_test(size=SIZE) as pilot:
            for e in (session_start(), run_started("cand-1", "candidate", 1, 1),
                      output("cand-1", _log_with_needles(), 2)):
                harness.bus.publish(e)
            runs = _live(app).query_one(RunsPanel)
            await until(pilot, lambda: runs.active_log() is not None
                        and runs.active_log()._shown == 1000)  # type: ignore[union-attr]
            log = runs.active_log()
            assert isinstance(log, LogView) and log.follow  # at the tail, far from line 300

            await pilot.press("slash")
            box = runs.panes["cand-1"].query_one(".run-search", Input)
            await until(pilot, lambda: box.display and box.has_focus)
            await type_text(pilot, "needle")
            await pilot.press("enter")
            await until(pilot, lambda: log.current == 300)
            await pilot.pause()
            assert not log.follow, "a match must stop following the tail"
            assert "step 300: needle in the log" in log.visible_text()
            assert _highlighted(app, "needle"), "the match is not marked on screen"

            await pilot.press("enter")
            await until(pilot, lambda: log.current == 700)
            assert "step 700: needle in the log" in log.visible_text()
            await pilot.press("enter")  # wraps around
            await until(pilot, lambda: log.current == 300)

            await pilot.press("escape")
            await until(pilot, lambda: not box.display)
            assert log.search == "" and log.current is None
            await pilot.pause()
            assert not _highlighted(app, "needle")

    async def test_a_missing_needle_moves_nothing(self, harness: Harness) -> None:
        app = harness.app()
        async with app.run_test(size=SIZE) as pilot:
            for e in (session_start(), run_started("cand-1", "candidate", 1, 1),
                      output("cand-1", train_lines(200), 2)):
                harness.bus.publish(e)
            runs = _live(app).query_one(RunsPanel)
            await until(pilot, lambda: runs.active_log() is not None
                        and runs.active_log()._shown == 200)  # type: ignore[union-attr]
            log = runs.active_log()
            assert log is not None
            await pilot.press("slash")
            await type_text(pilot, "nowhere")
            await pilot.press("enter")
            await pilot.pause()
            assert log.current is None and log.follow, "no match: the view stays on the tail"
            assert log.visible_text()[-1] == train_lines(200)[-1].replace("\t", "    ")


def _highlighted(app: Any, word: str) -> bool:
    for strip in app.screen._compositor.render_strips():
        for seg in strip:
            if word in seg.text and seg.style is not None \
                    and seg.style.bgcolor == MATCH_STYLE.bgcolor:
                return True
    return False


# --- `f` whole file, `s` side by side --------------------------------------------------------

LONG_BEFORE = "".join(f"x{i} = {i}\n" for i in range(1, 201))
# A line inserted after line 120 (below it the new side's numbers run one ahead) and one
# changed at line 150: both far below the first screenful.
LONG_AFTER = LONG_BEFORE.replace("x120 = 120\n", "x120 = 120\nimport os\n").replace(
    "x150 = 150\n", "x150 = 150.5\n")


class TestDiffViews:
    async def _long_edit(self, harness: Harness, pilot: Any) -> DiffBody:
        for e in (session_start(), edit(before=LONG_BEFORE, after=LONG_AFTER, path="cfg.py")):
            harness.bus.publish(e)
        await until(pilot, lambda: pilot.app.screen.query(DiffCard))
        await pilot.pause()
        return _body(pilot.app)

    async def test_f_shows_the_whole_file_from_the_change(self, harness: Harness) -> None:
        app = harness.app()
        async with app.run_test(size=SIZE) as pilot:
            body = await self._long_edit(harness, pilot)
            hunks = body.visible_text()
            assert hunks[0] == "@@ -118,6 +118,7 @@"
            assert "@@ -147,7 +148,7 @@" in hunks and not any("x100 " in r for r in hunks)

            await pilot.press("f")
            await until(pilot, lambda: body.full and body.scroll_y == 117)
            await pilot.pause()
            rows = body.visible_text()
            # It opens at the first change with three lines of context, not at line 1.
            assert rows[0] == "118   x118 = 118" and "121 + import os " in rows
            assert not any(row.startswith("@@") for row in rows), "whole file: no hunk headers"
            assert body.size.height == 24, "a whole file fills the card's maximum height"
            assert "x118 = 118" in "\n".join(screen_lines(app))
            # All of it: the hunks shown first must not have trimmed the file's two ends.
            body.scroll_end(animate=False)
            await pilot.pause()
            assert body.visible_text()[-1] == "201   x200 = 200"
            body.scroll_home(animate=False)
            await pilot.pause()
            assert body.visible_text()[0] == "  1   x1 = 1"

            await pilot.press("f")
            await until(pilot, lambda: not body.full)
            await pilot.pause()
            assert body.visible_text()[0] == "@@ -118,6 +118,7 @@"

    async def test_s_side_by_side_scrolls_both_sides_together(self, harness: Harness) -> None:
        app = harness.app()
        async with app.run_test(size=SIZE) as pilot:
            body = await self._long_edit(harness, pilot)
            await pilot.press("s", "f")
            await until(pilot, lambda: body.split and body.full and body.scroll_y == 117)
            await pilot.pause()
            rows = body.visible_text()
            assert "    ╱╱╱╱ ▕ 121 import os" in rows, "the inserted line faces a filler"
            body.scroll_to(y=160, animate=False)
            await pilot.pause()
            rows = body.visible_text()
            assert len(rows) > 10
            for row in rows:
                left, right = (part.strip().split(maxsplit=1) for part in row.split("▕"))
                # The same source line on both sides, the new file's number one further on.
                assert int(right[0]) == int(left[0]) + 1 and right[1] == left[1]
            first = rows[0].split()
            assert f"{first[0]} {first[1]}" in "\n".join(screen_lines(app))

    async def test_s_toggles_without_a_screen_layout(self, harness: Harness) -> None:
        app = harness.app()
        async with app.run_test(size=SIZE) as pilot:
            for e in (session_start(), edit()):
                harness.bus.publish(e)
            await until(pilot, lambda: app.screen.query(DiffCard))
            await pilot.pause(0.2)
            body = _body(app)
            height = body.size.height
            layouts = _layout_counter(app)
            await pilot.press("s")
            await until(pilot, lambda: "@@ +1,5" in "\n".join(screen_lines(app)))
            assert body.split and layouts == [], "`s` must only repaint the card"
            assert body.size.height == height
            await pilot.press("s")
            await until(pilot, lambda: "@@ -1,4 +1,5 @@" in "\n".join(screen_lines(app)))
            assert layouts == []


# --- `[` / `]` per-file navigation ------------------------------------------------------------


class TestFileNavigation:
    async def test_brackets_move_between_files_and_a_acts_on_the_selected_one(
            self, harness: Harness) -> None:
        decisions: dict[str, str] = {}

        async def engine() -> None:
            # One agent turn that changes two files: both wait for the reviewer at once.
            harness.bus.publish(session_start())
            proposals = [harness.bus.publish(e) for e in (
                edit("e1", "train.py"),
                edit("e2", "model.py", before="a = 1\n", after="a = 2\n", dt=6))]

            async def review(p: ev.Event) -> None:
                assert isinstance(p, ev.EditProposed)
                decisions[p.edit_id] = (await harness.gate.review_edit(p)).action

            await asyncio.gather(*(review(p) for p in proposals))

        app = harness.app(engine)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: len(harness.gate.pending_edits()) == 2
                        and len(app.screen.query(DiffCard)) == 2)
            screen = _live(app)
            cards = {c.edit_id: c for c in screen.query(DiffCard)}
            assert screen.current_edit == "e1" and cards["e1"].selected

            async def file_key(key: str) -> None:
                # `]` / `[` step through the selected diff's hunks first, then to the next file.
                start = screen.current_edit
                for _ in range(len(cards[start].body.wrapped().stops) + 1):
                    await pilot.press(key)
                    if screen.current_edit != start:
                        return

            await file_key("right_square_bracket")
            assert screen.current_edit == "e2"
            assert cards["e2"].selected and not cards["e1"].selected
            assert cards["e2"].has_focus
            await file_key("right_square_bracket")  # wraps
            assert screen.current_edit == "e1" and cards["e1"].has_focus
            await file_key("left_square_bracket")
            assert screen.current_edit == "e2"

            await pilot.press("a")
            await until(pilot, lambda: decisions)
            assert decisions == {"e2": "approve"}, "`a` must act on the file navigated to"
        rows = harness.interventions()
        assert [(r["action"], r["target_id"]) for r in rows] == [("approve", "e2")]


# --- `z` zoom keeps the header -----------------------------------------------------------------


class TestZoom:
    async def test_the_header_stays_on_top_of_a_zoomed_column(self, harness: Harness) -> None:
        app = harness.app()
        async with app.run_test(size=SIZE) as pilot:
            harness.bus.publish(session_start())
            await until(pilot, lambda: "running" in screen_lines(app)[0])
            screen = _live(app)
            for _ in range(3):
                await pilot.press("tab")
                col = screen._focused_column()
                assert col is not None
                await pilot.press("z")
                await pilot.pause()
                lines = screen_lines(app)
                assert screen.maximized is col
                assert lines[0].startswith(" portside") and "live · running" in lines[0]
                assert "SCRIPTED AGENT" in lines[2]  # the banner stays too
                assert col.region.y == 3 and col.region.width == SIZE[0]
                assert f"─ {col.border_title} " in lines[3]
                assert "z Zoom" in lines[-1]
                await pilot.press("z")
                await pilot.pause()
                assert screen.maximized is None


# --- `e` through $EDITOR ------------------------------------------------------------------------


EDITOR_SCRIPT = """import sys
from pathlib import Path

path = Path(sys.argv[1])
path.write_text(path.read_text().replace("parameters(), 0.05)", "parameters(), 1.0)"))
"""


class TestExternalEditor:
    async def test_e_then_ctrl_o_sends_what_the_editor_wrote(self, harness: Harness,
                                                             tmp_path: Path,
                                                             monkeypatch: Any) -> None:
        script = tmp_path / "editor.py"
        script.write_text(EDITOR_SCRIPT)
        monkeypatch.delenv("VISUAL", raising=False)
        monkeypatch.setenv("EDITOR", f"{sys.executable} {script}")
        decided: list[Any] = []

        async def engine() -> None:
            harness.bus.publish(session_start())
            proposed = harness.bus.publish(edit())
            assert isinstance(proposed, ev.EditProposed)
            decided.append(await harness.gate.review_edit(proposed))

        app = harness.app(engine)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: harness.gate.pending_edits())
            await pilot.press("e")
            await until(pilot, lambda: isinstance(app.screen, EditDialog))
            area = app.screen.query_one(TextArea)
            assert "parameters(), 0.05)" in area.text
            await pilot.press("ctrl+o")
            await until(pilot, lambda: "parameters(), 1.0)" in area.text)
            await pilot.press("ctrl+s")
            await until(pilot, lambda: decided)
            await until(pilot, lambda: any(True for _ in harness.store.events(
                SID, kinds=["edit.decided"])))

        rows = harness.store.interventions(SID)
        assert [(r["action"], r["target_id"]) for r in rows] == [("edit", "e1")]
        assert rows[0]["attention_started_at"] <= rows[0]["decided_at"]
        (decision,) = harness.store.events(SID, kinds=["edit.decided"])
        assert isinstance(decision, ev.EditDecided) and decision.decision == "edited"
        expected = TRAIN_AFTER.replace("parameters(), 0.05)", "parameters(), 1.0)")
        assert decision.after == expected


# --- the flood's promise -----------------------------------------------------------------------


class TestFlood:
    async def test_batches_of_log_lines_do_not_lay_out_the_screen(self, harness: Harness
                                                                   ) -> None:
        app = harness.app()
        async with app.run_test(size=SIZE) as pilot:
            for e in (session_start(), edit(), run_started("cand-1", "candidate", 1, 1),
                      output("cand-1", train_lines(100), 2)):
                harness.bus.publish(e)
            runs = _live(app).query_one(RunsPanel)
            await until(pilot, lambda: runs.active_log() is not None
                        and runs.active_log()._shown == 100)  # type: ignore[union-attr]
            await pilot.pause(0.2)
            log = runs.active_log()
            assert log is not None
            layouts = _layout_counter(app)
            for i in range(10):
                harness.bus.publish(output("cand-1", [f"batch {i} line {j}" for j in range(200)],
                                           3 + i))
                await pilot.pause(0.08)  # about one redraw tick per batch
            await until(pilot, lambda: log._shown == 2100)
            await pilot.pause()
            assert layouts == [], f"{len(layouts)} screen layouts for 10 batches of lines"
            # ...and the view still follows the tail.
            assert log.visible_text()[-1] == "batch 9 line 199"
            assert "batch 9 line 199" in "\n".join(screen_lines(app))
