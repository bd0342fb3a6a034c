"""A proposed edit as a card: unified or side-by-side diff, hunks or the whole file."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.reactive import reactive
from textual.widgets import ContentSwitcher, Static

from ..diffing import EditDiff
from ..model import EditView


class SyncedScroll(VerticalScroll):
    """One pane of a side-by-side diff: scrolling either pane scrolls its partner."""

    partner: SyncedScroll | None = None

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        if self.partner is not None and self.partner.scroll_y != new_value:
            self.partner.scroll_to(y=new_value, animate=False)

    def watch_scroll_x(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_x(old_value, new_value)
        if self.partner is not None and self.partner.scroll_x != new_value:
            self.partner.scroll_to(x=new_value, animate=False)


class DiffCard(Vertical, can_focus=True):
    """One file of a proposed edit. ``s`` toggles side by side, ``f`` the whole file."""

    split: reactive[bool] = reactive(False)
    full: reactive[bool] = reactive(False)
    selected: reactive[bool] = reactive(False)

    def __init__(self, view: EditView, *, id: str | None = None) -> None:
        super().__init__(id=id, classes="diff-card")
        self.view = view
        e = view.event
        self.diff = EditDiff(e.before, e.after, e.path)
        self.index = 1
        self.total = 1
        self._rendered: tuple[bool, bool] | None = None
        self._filled: set[tuple[bool, bool]] = set()  # bodies already rendered into the panes
        self._ready = False

    @property
    def edit_id(self) -> str:
        return self.view.event.edit_id

    def compose(self) -> ComposeResult:
        yield Static(self._title(), classes="card-title")
        if self.view.event.rationale:
            yield Static(Text(self.view.event.rationale), classes="card-rationale")
        with ContentSwitcher(initial="unified", classes="card-body"):
            with VerticalScroll(id="unified", classes="diff-pane"):
                yield Static(id="unified-text")
            with Horizontal(id="split"):
                yield SyncedScroll(Static(id="left-text"), id="left", classes="diff-pane")
                yield SyncedScroll(Static(id="right-text"), id="right", classes="diff-pane")
        yield Static(self._hint(), classes="card-hint")

    def on_mount(self) -> None:
        left, right = self.query_one("#left", SyncedScroll), self.query_one("#right", SyncedScroll)
        left.partner, right.partner = right, left
        self._ready = True
        self._render_body()
        # Render the other view now, off the key path: `s` then only switches panes.
        self.call_after_refresh(self._prefill)

    def _prefill(self) -> None:
        if (True, False) not in self._filled and not self.full:
            left, right = self.diff.side_by_side(3)
            self.query_one("#left-text", Static).update(left)
            self.query_one("#right-text", Static).update(right)
            self._filled.add((True, False))

    def _title(self) -> Text:
        e, st = self.view.event, self.diff.stats
        t = Text()
        t.append(f"edit {self.index}/{self.total} ", style="bold")
        t.append(e.path, style="bold #e5c07b")
        t.append(f"  +{st.added}", style="green")
        t.append(f" −{st.removed}", style="red")
        status = self.view.status
        style = "yellow" if self.view.decided is None else (
            "green" if status.startswith("approved") else "red" if status.startswith("rejected")
            else "cyan")
        t.append(f"  {status}", style=style)
        return t

    def _hint(self) -> Text:
        if self.view.decided is not None:
            return Text("s side-by-side · f full file · [ ] files", style="dim")
        return Text("a approve · r reject · e edit · s side-by-side · f full file · [ ] files",
                    style="dim")

    def refresh_status(self, index: int | None = None, total: int | None = None) -> None:
        if index is not None:
            self.index = index
        if total is not None:
            self.total = total
        self.set_class(self.view.decided is None, "pending")
        if self._ready:
            self.query_one(".card-title", Static).update(self._title())
            self.query_one(".card-hint", Static).update(self._hint())

    def watch_split(self) -> None:
        self._render_body()

    def watch_full(self) -> None:
        self._render_body()

    def watch_selected(self, selected: bool) -> None:
        self.set_class(selected, "selected")

    def _render_body(self) -> None:
        if not self._ready or self._rendered == (self.split, self.full):
            return
        self._rendered = (self.split, self.full)
        context = None if self.full else 3
        switcher = self.query_one(ContentSwitcher)
        key = (self.split, self.full)
        if self.split:
            if key not in self._filled:
                left, right = self.diff.side_by_side(context)
                self.query_one("#left-text", Static).update(left)
                self.query_one("#right-text", Static).update(right)
                self._filled.discard((True, not self.full))
                self._filled.add(key)
            switcher.current = "split"
        else:
            if key not in self._filled:
                self.query_one("#unified-text", Static).update(self.diff.unified(context))
                self._filled.discard((False, not self.full))
                self._filled.add(key)
            switcher.current = "unified"
        if self.full:
            # Whole file: start where the change is, not at line 1.
            line = self.diff.first_changed_line()
            for pane in self.query(".diff-pane"):
                pane.call_after_refresh(pane.scroll_to, y=max(0, line - 3), animate=False)
