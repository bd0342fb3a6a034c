"""What an edit card and a command card share: the reviewer's state (selected, pending, its
number among its kind) and the title / hint refresh when a decision lands. Each card says what
its title, hint and body are."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.containers import Vertical
from textual.reactive import reactive
from textual.widgets import Static


def status_style(status: str, decided: bool) -> str:
    if not decided:
        return "yellow"
    return ("green" if status.startswith("approved")
            else "red" if status.startswith("rejected") else "cyan")


class ProposalCard(Vertical, can_focus=True):
    # The screen's view keys (s / f) set these on any card; a card with one view ignores them.
    split: reactive[bool] = reactive(False, repaint=False)
    full: reactive[bool] = reactive(False, repaint=False)
    selected: reactive[bool] = reactive(False)
    view: Any  # the model's EditView / CommandView: .event, .decided, .status

    def __init__(self, *, id: str | None = None, classes: str = "diff-card") -> None:
        super().__init__(id=id, classes=classes)
        self.index = 1
        self.total = 1
        self._ready = False

    @property
    def edit_id(self) -> str:
        """The id the gate's a / r / e answer."""
        raise NotImplementedError

    def _title(self) -> Text:
        raise NotImplementedError

    def ordinal(self, noun: str) -> str:
        """`edit 3 · 2 before` for the newest ("3/3" read as "the last edit"), else
        `edit 2 of 5`."""
        if self.index < self.total:
            return f"{noun} {self.index} of {self.total}"
        before = self.index - 1
        return f"{noun} {self.index}" + (f" · {before} before" if before else "")

    def _hint(self) -> Text:
        raise NotImplementedError

    def on_mount(self) -> None:
        self._ready = True

    def refresh_status(self, index: int | None = None, total: int | None = None) -> None:
        if index is not None:
            self.index = index
        if total is not None:
            self.total = total
        self.set_class(self.view.decided is None, "pending")
        if self._ready:
            self.query_one(".card-title", Static).update(self._title())
            self.query_one(".card-hint", Static).update(self._hint())

    def watch_selected(self, selected: bool) -> None:
        self.set_class(selected, "selected")
