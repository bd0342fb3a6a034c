"""`?`: every key of the live screen, with what it does and why you would press it."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static


def key_label(key: str) -> str:
    names = {"question_mark": "?", "space": "space", "slash": "/", "left_square_bracket": "[",
             "right_square_bracket": "]", "less_than_sign": "<", "greater_than_sign": ">",
             "plus": "+", "minus": "-", "full_stop": ".", "dollar_sign": "$"}
    return ", ".join(names.get(k.strip(), k.strip()) for k in key.split(","))


def bindings_table(bindings: list[Binding]) -> Table:
    table = Table(box=None, expand=True, show_header=True, header_style="bold")
    table.add_column("key", style="bold #e5c07b", no_wrap=True)
    table.add_column("action", no_wrap=True)
    table.add_column("what it does")
    for b in bindings:
        table.add_row(key_label(b.key), Text(b.description), Text(b.tooltip, style="dim"))
    return table


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "Close", id="help.close",
                        tooltip="Close the help")]

    def __init__(self, bindings: list[Binding],
                 title: str = "portside · keys of the live review") -> None:
        super().__init__(classes="dialog")
        self.bindings_shown = bindings
        self.title_text = title

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog-box help-box"):
            yield Static(Text(self.title_text, style="bold"))
            with VerticalScroll(id="help-keys"):
                yield Static(bindings_table(self.bindings_shown))
            yield Static(Text("", style="dim"), id="help-more")
            yield Static(Text("Every action is written to the session's database before it is "
                              "confirmed on screen. ctrl+p opens the command palette · esc closes",
                              style="dim"))

    def on_mount(self) -> None:
        keys = self.query_one("#help-keys", VerticalScroll)
        keys.focus()  # ↑ ↓ PgUp PgDn Home End scroll the list at once
        self.call_after_refresh(self._hint_more)

    def _hint_more(self) -> None:
        # The list is longer than the box at 120×40: say so, or the keys below are never seen.
        keys = self.query_one("#help-keys", VerticalScroll)
        more = self.query_one("#help-more", Static)
        if keys.max_scroll_y > 0:
            more.update(Text(f"↓ more keys below ({keys.max_scroll_y} rows) · ↑ ↓ PgUp PgDn "
                             "Home End scroll this list", style="bold #e5c07b"))
        more.display = keys.max_scroll_y > 0

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(result)
