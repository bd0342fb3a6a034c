"""The review screens' key footer: one widget drawing what Textual's Footer drew (its keys,
the command palette's docked right), and a click on a key pressing it."""

from __future__ import annotations

from typing import Any

from conftest import Harness, until
from test_replay_first_frame import SIZE, _app, _first_frame, _session
from textual.command import CommandPalette
from textual.widgets import Footer

from portside.tui.screens.help import HelpScreen
from portside.tui.widgets.footer import ReviewFooter


def _line(app: Any) -> str:
    return app.screen._compositor.render_strips()[-1].text  # type: ignore[no-any-return]


async def _textual_footer_line(app: Any, pilot: Any) -> str:
    """Ground truth: Textual's own Footer, mounted in place of ours on the same screen."""
    ours = app.screen.query_one(ReviewFooter)
    await ours.remove()
    await app.screen.mount(Footer())
    app.screen.refresh_bindings()  # it draws nothing until told the bindings are ready
    await until(pilot, lambda: app.screen.query_one(Footer).children)
    await pilot.pause()
    return _line(app)


class TestDrawn:
    async def test_the_replay_footer_reads_as_textuals(self) -> None:
        app = _app(_session(600))
        async with app.run_test(size=SIZE) as pilot:
            await _first_frame(pilot)
            ours = _line(app)
            theirs = await _textual_footer_line(app, pilot)
        assert ours == theirs, (ours, theirs)
        assert ours.startswith(" space Play/Pause  + Faster ") and ours.endswith("▏^p palette ")
        assert len(ours) == SIZE[0]

    async def test_the_live_footer_reads_as_textuals(self, harness: Harness) -> None:
        app = harness.app()
        async with app.run_test(size=(160, 40)) as pilot:
            await pilot.pause(0.2)
            ours = _line(app)
            theirs = await _textual_footer_line(app, pilot)
        assert ours == theirs, (ours, theirs)
        assert " a Approve " in ours and " q Quit " in ours


class TestClicked:
    async def test_a_click_on_a_key_presses_it(self) -> None:
        app = _app(_session(600))
        async with app.run_test(size=SIZE) as pilot:
            await _first_frame(pilot)
            footer = app.screen.query_one(ReviewFooter)
            x = _line(app).index(" ? ") + 1
            await pilot.click(ReviewFooter, offset=(x, 0))
            await until(pilot, lambda: isinstance(app.screen, HelpScreen))
            await pilot.press("escape")
            await until(pilot, lambda: not isinstance(app.screen, HelpScreen))
            # the palette's key, docked at the right edge
            await pilot.click(ReviewFooter, offset=(footer.size.width - 3, 0))
            await until(pilot, lambda: isinstance(app.screen, CommandPalette))

    async def test_a_click_between_keys_does_nothing(self) -> None:
        app = _app(_session(600))
        async with app.run_test(size=(200, 40)) as pilot:
            await _first_frame(pilot)
            before = app.screen
            # wide enough for every key: past the last one, left of the palette's, no key
            line = _line(app)
            assert line.index("▏") - len(line[:line.index("▏")].rstrip()) > 2, line
            await pilot.click(ReviewFooter, offset=(line.index("▏") - 1, 0))
            await pilot.pause(0.1)
            assert app.screen is before


class TestHovered:
    async def test_the_key_under_the_pointer_is_highlighted_with_its_tooltip(self) -> None:
        app = _app(_session(600))
        async with app.run_test(size=SIZE) as pilot:
            await _first_frame(pilot)
            footer = app.screen.query_one(ReviewFooter)
            plain = app.screen._compositor.render_strips()[-1]
            x = _line(app).index(" + ") + 1
            await pilot.hover(ReviewFooter, offset=(x, 0))
            await until(pilot, lambda: footer.tooltip is not None)
            await pilot.pause()
            hovered = app.screen._compositor.render_strips()[-1]
            # the binding's own tooltip, as Textual's footer shows it
            assert footer.tooltip == app.screen.active_bindings["plus"].tooltip
            assert footer.tooltip
            # the same text, another background under that key only
            assert hovered.text == plain.text

            def bg(strip: Any, at: int) -> Any:
                return strip.crop(at, at + 1)._segments[0].style.bgcolor
            assert bg(hovered, x) != bg(plain, x)
            assert bg(hovered, 0) == bg(plain, 0)
