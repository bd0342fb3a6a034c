"""A proposed edit as a card: unified or side-by-side diff, hunks or the whole file.

The diff body is one Line-API widget: it renders only the rows in view, from rows laid out once
per view and width. Long lines wrap onto rows that start with a continuation mark (↪), so the
part of a line that changed is on screen however narrow the card. Side by side is a two-column rendering of the same widget, so both sides scroll
together by construction, and `s` only changes which rows are drawn: the card keeps its height
(the taller of the two views), so toggling repaints the card without a layout of the screen.
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.geometry import Region, Size
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Static

from portside.core.log import events as ev
from portside.core.safety.terminal_text import clean_line

from ..diffing import GUTTER, DiffRows, EditDiff
from ..model import EditView
from .lines import Frame, frame, set_virtual_size, text_strip
from .proposal_card import ProposalCard, status_style

HUNK_CONTEXT = 3
SEPARATOR = "▕"
CONTINUED = "↪ "  # a wrapped line's next row: the change past the edge is never cut off


class DiffBody(ScrollView, can_focus=True):
    """The rows of one diff view, unified or side by side."""

    COMPONENT_CLASSES = {"diff-body--separator"}
    DEFAULT_CSS = """
    DiffBody > .diff-body--separator { color: $panel-lighten-2; }
    """

    def __init__(self, diff: EditDiff, *, id: str | None = None) -> None:
        super().__init__(id=id, classes="diff-body")
        self.diff = diff
        self.split = False
        self.full = False
        self._rows: dict[tuple[bool, bool], DiffRows] = {}
        self._wrapped: dict[tuple[bool, bool, int], DiffRows] = {}
        self._strips: dict[tuple[bool, bool, int], dict[int, tuple[Strip, Strip | None]]] = {}
        self._width = 0  # the width rows are wrapped to (the view's)
        self._frame: Frame = (Style(), 0, 0, 0)
        self._separator = Strip([Segment(SEPARATOR)], 1)
        # The new file's lines risk marks point at: the body opens on the first one's hunk
        # (once), and `]` / `[` stop at each of them as at each hunk.
        self.mark_lines: list[int] = []
        self._placed = False

    def rows(self, split: bool | None = None, full: bool | None = None) -> DiffRows:
        key = (self.split if split is None else split, self.full if full is None else full)
        if key not in self._rows:
            context = None if key[1] else HUNK_CONTEXT
            self._rows[key] = (self.diff.side_by_side(context) if key[0]
                               else self.diff.unified(context))
        return self._rows[key]

    def wrapped(self, split: bool | None = None, full: bool | None = None,
                width: int | None = None) -> DiffRows:
        """The rows of a view wrapped to ``width`` cells (each side to its column)."""
        split = self.split if split is None else split
        full = self.full if full is None else full
        width = self._width if width is None else width
        key = (split, full, width)
        if key not in self._wrapped:
            rows = self.rows(split, full)
            if width <= 0:
                self._wrapped[key] = rows
            else:
                gutter = len(str(max(len(self.diff.a), len(self.diff.b), 1)))
                self._wrapped[key] = (wrap_pairs(rows, max(1, (width - 1) // 2), gutter + 1)
                                      if split else wrap_rows(rows, width, gutter + 3))
        return self._wrapped[key]

    def colour(self) -> None:
        """Syntax colour on, if it was held back: same text, same rows, so only a repaint."""
        if not self.diff.colour:
            self.diff.colour = True
            self._rows.clear()
            self._wrapped.clear()
            self._strips.clear()
            self.refresh()

    def show(self, split: bool, full: bool) -> None:
        """Switch the view. Only `f` (a different set of rows) changes the card's height."""
        if (split, full) == (self.split, self.full):
            return
        relayout = full != self.full
        self.split, self.full = split, full
        self._sync_virtual_size()
        if relayout:
            self.refresh(layout=True)
            # Whole file: start where the (marked) change is, not at line 1.
            top = self.opening_row() or (max(0, self.wrapped().first_change - 3) if full else 0)
            self.call_after_refresh(self.scroll_to, y=top, animate=False)
        self.refresh()

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        # Both views' height, so that `s` never changes the card's size (this also lays out the
        # other view's rows before its key is pressed).
        return max(len(self.wrapped(False, self.full, width)),
                   len(self.wrapped(True, self.full, width)))

    def on_mount(self) -> None:
        self._sync_virtual_size()

    def on_resize(self) -> None:
        self._sync_virtual_size()
        if not self._placed and self.size.height:
            self._placed = True
            top = self.opening_row()
            if top:
                self.call_after_refresh(self.scroll_to, y=top, animate=False)

    def opening_row(self) -> int:
        """Where the body opens: on the hunk of the marked line, or lower if that hunk is
        taller than the view (the marked line itself always in view)."""
        rows = self.wrapped()
        row = rows.row_of_line(self.mark_lines[0]) if self.mark_lines else None
        if row is None:
            return 0
        stop = max((s for s in rows.stops if s <= row), default=0)
        height = self.scrollable_content_region.height or self.size.height
        return stop if row - stop < height - 1 else max(0, row - 2)

    def scroll_rows(self, n: int) -> None:
        self.scroll_to(y=self.scroll_y + n, animate=False)

    def step_hunk(self, step: int) -> bool:
        """Scroll to the next (step 1) or previous (-1) hunk; False when there is none that
        would move the view (the caller goes on to the next or previous card)."""
        y = round(self.scroll_y)
        rows = self.wrapped()
        marked = (rows.row_of_line(line) for line in self.mark_lines)
        stops = sorted({*rows.stops, *(max(0, r - 2) for r in marked if r is not None)})
        if step > 0:
            ahead = [s for s in stops if min(s, self.max_scroll_y) > y]
            target = ahead[0] if ahead else None
        else:
            behind = [s for s in stops if s < y]
            target = behind[-1] if behind else (0 if y > 0 else None)
        if target is None:
            return False
        self.scroll_to(y=target, animate=False)
        return True

    def _sync_virtual_size(self) -> None:
        # Rows wrap to the view: nothing to scroll sideways.
        self._width = self.scrollable_content_region.width or self.size.width
        set_virtual_size(self, Size(self._width, len(self.wrapped())))

    def render_lines(self, crop: Region) -> list[Strip]:
        self._frame = frame(self)
        if self.split:
            style = self._frame[0] + self.get_component_rich_style("diff-body--separator")
            self._separator = Strip([Segment(SEPARATOR, style)], 1)
        return super().render_lines(crop)

    def render_line(self, y: int) -> Strip:
        style, width, sx, sy = self._frame
        index = sy + y
        rows = self.wrapped()
        if index >= len(rows):
            return Strip.blank(width, style)
        left, right = self._row_strips(index)
        # The card's colours under the diff's own, as a Static would draw them.
        left = left.apply_style(style)
        if right is None:
            return left.crop_extend(sx, sx + width, style)
        column = max(1, (width - 1) // 2)
        return Strip.join([
            left.crop_extend(sx, sx + column, style),
            self._separator,
            right.apply_style(style).crop_extend(sx, sx + width - 1 - column, style),
        ])

    def _row_strips(self, index: int) -> tuple[Strip, Strip | None]:
        cache = self._strips.setdefault((self.split, self.full, self._width), {})
        cached = cache.get(index)
        if cached is None:
            rows = self.wrapped()
            console = self.app.console
            right = text_strip(rows.right[index], console) if self.split else None
            cached = cache[index] = (text_strip(rows.left[index], console), right)
        return cached

    def visible_text(self) -> list[str]:
        """The rows now in view, as plain text (tests)."""
        rows = self.wrapped()
        top = int(self.scroll_y)
        end = min(len(rows), top + self.scrollable_content_region.height)
        if not self.split:
            return [rows.left[i].plain for i in range(top, end)]
        return [f"{rows.left[i].plain} {SEPARATOR} {rows.right[i].plain}" for i in range(top, end)]


def wrap_text(text: Text, width: int, gutter: int) -> list[Text]:
    """``text`` cut into rows of ``width`` cells; each next row starts under the line's gutter
    with the continuation mark. Styles (the change's marks) travel with the characters."""
    if text.cell_len <= width or width < gutter + 8:
        return [text]
    out = [text[:width]]
    step = width - gutter
    indent = " " * max(0, gutter - len(CONTINUED)) + CONTINUED
    for start in range(width, len(text.plain), step):
        row = Text(indent, style=GUTTER, no_wrap=True, end="")
        row.append_text(text[start:start + step])
        out.append(row)
    return out


def _remapped(rows: DiffRows, left: list[Text], right: list[Text], n_rows: list[int]
              ) -> DiffRows:
    """``rows``' landmarks (first change, hunk stops, lines) once row ``i`` became
    ``n_rows[i]`` rows."""
    start = [0]
    for n in n_rows:
        start.append(start[-1] + n)
    return DiffRows(left, right, start[rows.first_change], [start[i] for i in rows.stops],
                    {line: start[i] for line, i in rows.new_rows.items()})


def wrap_rows(rows: DiffRows, width: int, gutter: int) -> DiffRows:
    out: list[Text] = []
    counts = []
    for t in rows.left:
        parts = wrap_text(t, width, gutter)
        counts.append(len(parts))
        out += parts
    return _remapped(rows, out, [], counts)


def wrap_pairs(rows: DiffRows, column: int, gutter: int) -> DiffRows:
    """Side by side: both sides wrap to their column and stay level (the shorter is padded)."""
    left: list[Text] = []
    right: list[Text] = []
    counts = []
    for a, b in zip(rows.left, rows.right, strict=True):
        pa, pb = wrap_text(a, column, gutter), wrap_text(b, column, gutter)
        n = max(len(pa), len(pb))
        counts.append(n)
        left += pa + [Text("")] * (n - len(pa))
        right += pb + [Text("")] * (n - len(pb))
    return _remapped(rows, left, right, counts)


def risk_text(risks: list[ev.RiskMark]) -> Text:
    """The marks of an edit, one a line: what the reviewer should look at before approving."""
    t = Text()
    for i, mark in enumerate(risks):
        if i:
            t.append("\n")
        t.append("⚠ ", style="bold #e5c07b")
        t.append(clean_line(mark.text), style="#e5c07b")
        if mark.line:
            t.append(f"  (line {mark.line})", style="dim")
    return t


class DiffCard(ProposalCard):
    """One file of a proposed edit. ``s`` toggles side by side, ``f`` the whole file (the body
    redraws itself on those; repainting the whole card would be wasted)."""

    def __init__(self, view: EditView, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.view = view
        e = view.event
        self.diff = EditDiff(e.before, e.after, e.path)
        self.body = DiffBody(self.diff)
        self.body.mark_lines = [m.line for m in e.risks if m.line]

    @property
    def edit_id(self) -> str:
        return self.view.event.edit_id

    def compose(self) -> ComposeResult:
        yield Static(self._title(), classes="card-title")
        if self.view.event.risks:
            yield Static(risk_text(self.view.event.risks), classes="card-risks")
        if self.view.event.rationale:
            yield Static(Text(self.view.event.rationale), classes="card-rationale")
        yield self.body
        yield Static(self._hint(), classes="card-hint")

    def _title(self) -> Text:
        e, st = self.view.event, self.diff.stats
        t = Text()
        t.append(f"{self.ordinal('edit')} ", style="bold")
        t.append(e.path, style="bold #e5c07b")
        t.append(f"  +{st.added}", style="green")
        t.append(f" −{st.removed}", style="red")
        status = self.view.status
        t.append(f"  {status}", style=status_style(status, self.view.decided is not None))
        return t

    def _hint(self) -> Text:
        keys = "j J scroll · ] [ hunks, files · s side-by-side · f full file"
        if self.view.decided is not None:
            return Text(keys, style="dim")
        return Text(f"a approve · r reject · e edit · {keys}", style="dim")

    def watch_split(self) -> None:
        self.body.show(self.split, self.full)

    def watch_full(self) -> None:
        self.body.show(self.split, self.full)

