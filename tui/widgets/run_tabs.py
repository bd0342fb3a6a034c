"""The Runs column's tab strip: one widget however many runs, drawn like Textual's Tabs.

A TabbedContent mounts a Tab (and a pane) per run and moves its underline on every add and
relabel: a replay of a session with 90 runs spent most of its first frame there. This strip
holds only the runs' ids; it renders the labels that fit, around the active one, on each refresh,
so a relabel is a refresh and a new run is an append.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.message import Message
from textual.renderables.bar import Bar
from textual.strip import Strip
from textual.widget import Widget

PAD = 1  # each side of a label, as Textual's Tab (padding: 0 1)


class RunTabs(Widget, can_focus=True):
    """Labels on the first line, the underline under the active one on the second."""

    DEFAULT_CSS = """
    RunTabs {
        width: 100%;
        height: 2;
        & > .run-tabs--tab { color: $foreground 50%; }
        & > .run-tabs--active { color: $foreground; }
        & > .run-tabs--bar {
            color: $block-cursor-background;
            background: $foreground 10%;
        }
        &:ansi > .run-tabs--tab { text-style: dim; }
        &:ansi > .run-tabs--active { text-style: not dim bold; }
        &:ansi > .run-tabs--bar {
            color: $block-cursor-background;
            background: $border-blurred;
        }
        &:focus > .run-tabs--bar { background: $foreground 30%; }
        &:focus > .run-tabs--active {
            text-style: $block-cursor-text-style;
            color: $block-cursor-foreground;
            background: $block-cursor-background;
        }
    }
    """
    COMPONENT_CLASSES = {"run-tabs--tab", "run-tabs--active", "run-tabs--bar"}
    BINDINGS = [
        Binding("left", "step(-1)", "Previous run", show=False),
        Binding("right", "step(1)", "Next run", show=False),
        Binding("home", "edge(0)", "First run", show=False),
        Binding("end", "edge(-1)", "Last run", show=False),
    ]

    class Activated(Message):
        """The reviewer picked a run's tab (click or key)."""

        def __init__(self, run_id: str) -> None:
            super().__init__()
            self.run_id = run_id

    def __init__(self, label: Callable[[str], str], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.label = label  # run id -> its label now (read on each render: no relabel step)
        self.run_ids: list[str] = []
        # The selected run. A plain attribute: its owner (RunsPanel) sets it and redraws the
        # strip once a batch (a replay's load selects 90 runs in turn).
        self.active: str | None = None
        self._index: dict[str, int] = {}
        self._spans: list[tuple[int, int, str]] = []  # (x0, x1, run id) of the last render

    def add(self, run_id: str, redraw: bool = True) -> None:
        """Append a run's tab; ``redraw`` False: the caller redraws the strip once for a
        batch of them."""
        if run_id not in self._index:
            self._index[run_id] = len(self.run_ids)
            self.run_ids.append(run_id)
            if redraw:
                self.refresh()

    # --- drawing -----------------------------------------------------------------------------

    def _layout(self, width: int) -> tuple[list[tuple[int, int, str, str]], int]:
        """The tabs that show at ``width`` (x0, x1, run id, label; x relative to the strip)
        and the strip's scroll offset, which keeps the active tab in view, centred when the
        labels overflow (as Tabs scrolls to it)."""
        labels = [self.label(r) for r in self.run_ids]
        xs: list[int] = []
        x = 0
        for text in labels:
            xs.append(x)
            x += len(text) + 2 * PAD
        total = x
        offset = 0
        i = self._index.get(self.active or "")
        if total > width and i is not None:
            mid = xs[i] + (len(labels[i]) + 2 * PAD) // 2
            offset = max(0, min(total - width, mid - width // 2))
        shown = [(xs[k] - offset, xs[k] - offset + len(t) + 2 * PAD, self.run_ids[k], t)
                 for k, t in enumerate(labels)
                 if xs[k] - offset < width and xs[k] - offset + len(t) + 2 * PAD > 0]
        return shown, offset

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        shown, _ = self._layout(width)
        self._spans = [(x0, x1, run_id) for x0, x1, run_id, _ in shown]
        base = Style(bgcolor=self.rich_style.bgcolor)
        if y == 0:
            tab = self.get_component_rich_style("run-tabs--tab")
            act = self.get_component_rich_style("run-tabs--active")
            row = Text(no_wrap=True, overflow="crop", end="")
            for _x0, _x1, run_id, text in shown:
                style = act if run_id == self.active else tab
                pad = Style(bgcolor=style.bgcolor)  # padding: the tab's background only
                row.append(" " * PAD, style=pad)
                row.append(text, style=style)
                row.append(" " * PAD, style=pad)
            if shown and shown[0][0] < 0:  # the first one shown is cut by the left edge
                row = row[-shown[0][0]:]
            row.truncate(width, pad=True)
            return Strip(list(row.render(self.app.console)), width).apply_style(base)
        if y == 1:
            bar = self.get_component_rich_style("run-tabs--bar")
            span = next(((x0 + PAD, x1 - PAD) for x0, x1, run_id, _ in shown
                         if run_id == self.active), (0, 0))
            renderable = Bar(highlight_range=(max(0, span[0]), max(0, span[1])),
                             highlight_style=Style.from_color(bar.color),
                             background_style=Style.from_color(bar.bgcolor), width=width)
            segments = list(self.app.console.render(
                renderable, self.app.console.options.update_width(width)))
            return Strip(segments, width).crop(0, width).apply_style(base)
        return Strip.blank(width, base)

    # --- picking -----------------------------------------------------------------------------

    def _pick(self, run_id: str) -> None:
        if run_id != self.active:
            self.post_message(self.Activated(run_id))

    def on_click(self, event: events.Click) -> None:
        shown, _ = self._layout(self.size.width)
        for x0, x1, run_id, _label in shown:
            if x0 <= event.x < x1:
                self._pick(run_id)
                return

    def action_step(self, delta: int) -> None:
        if not self.run_ids:
            return
        i = self._index.get(self.active or "", len(self.run_ids) - 1)
        self._pick(self.run_ids[max(0, min(len(self.run_ids) - 1, i + delta))])

    def action_edge(self, end: int) -> None:
        if self.run_ids:
            self._pick(self.run_ids[end])
