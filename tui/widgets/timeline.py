"""The replay's timeline bar: the whole session on one line, its markers, and the play position.

Markers are bucketed into the bar's cells once per width (a million-event session has only a few
thousand markers); moving the position only repaints the line.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual.widget import Widget

# Most telling first: a cell holding several markers shows the highest-ranked one.
MARKS: dict[str, tuple[int, str, str]] = {
    "alarm.raised": (0, "✖", "bold red"),
    "intervention": (1, "●", "bold #c678dd"),
    "agent.claimed": (2, "◆", "bold #e5c07b"),
    "session.ended": (3, "■", "bold"),
    "run.finished": (4, "┤", "#61afef"),
    "run.started": (5, "├", "#61afef"),
}
LEGEND = " ✖ alarm ● intervention ◆ claim ├┤ run "
# What the bar says while the session opens (tui/replay_app.py builds the replay in a thread).
LOADING = " loading… the session's index, snapshots and the point to open at "


class Timeline(Widget):
    DEFAULT_CSS = """
    Timeline { height: 1; background: $panel; }
    """

    def __init__(self, markers: list[tuple[int, float, str]] | None, duration: float,
                 position: Callable[[], float], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.markers = markers  # (seq, replay offset, kind); None: still loading
        self.duration = duration
        self.position = position  # replay offset (s) of the shown point
        self._cells: dict[int, tuple[str, str]] = {}
        self._width = -1
        self._shown_at = -1.0

    def loaded(self, markers: list[tuple[int, float, str]], duration: float) -> None:
        """The session is open: draw its markers in place of the loading line."""
        self.markers, self.duration, self._width = markers, duration, -1
        self.refresh()

    def sync(self) -> None:
        """Repaint only when the position moved: a refresh on every tick would keep the app
        from ever being idle (and repaint a modal's backdrop 15 times a second)."""
        offset = self.position()
        if offset != self._shown_at:
            self._shown_at = offset
            self.refresh()

    def _bucket(self, width: int) -> None:
        best: dict[int, int] = {}
        self._cells = {}
        for _seq, offset, kind in self.markers or ():
            rank, mark, style = MARKS.get(kind, (9, "·", "dim"))
            cell = self._cell(offset, width)
            if cell not in best or rank < best[cell]:
                best[cell] = rank
                self._cells[cell] = (mark, style)
        self._width = width

    def _cell(self, offset: float, width: int) -> int:
        if self.duration <= 0 or width <= 1:
            return 0
        return min(width - 1, max(0, int(offset / self.duration * (width - 1) + 0.5)))

    def render(self) -> Text:
        if self.markers is None:
            return Text(LOADING, style="bold #e5c07b", no_wrap=True, overflow="ellipsis")
        legend = LEGEND if self.size.width >= 60 else ""
        width = max(1, self.size.width - len(legend) - 2)
        if width != self._width:
            self._bucket(width)
        here = self._cell(self.position(), width)
        t = Text(no_wrap=True, overflow="crop")
        t.append(" ")
        for x in range(width):
            mark, style = self._cells.get(x, ("─", "#5c6370" if x > here else "#98c379"))
            if x == here:
                t.append("▼" if mark == "─" else mark, style=f"{style} reverse" if mark != "─"
                         else "bold #98c379")
            else:
                t.append(mark, style=style)
        t.append(" ")
        t.append(legend, style="dim")
        return t
