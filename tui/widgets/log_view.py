"""A run's log on the Line API: only visible lines are ever rendered.

The lines live in the model's :class:`LineStore`; ``render_line`` cleans one line on demand
(``clean_line``: no escape ever reaches the terminal) and keeps the Strip in a small LRU cache.
The view follows the tail until the reviewer scrolls up, and follows again once they scroll back
to the bottom.
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.cache import LRUCache
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from portside.core.textsafe import clean_line

from ..linestore import LineStore

MATCH_STYLE = Style(bgcolor="#8a6d00", color="#ffffff", bold=True)
CURRENT_STYLE = Style(bgcolor="#2c4f7c")


class LogView(ScrollView, can_focus=True):
    DEFAULT_CSS = """
    LogView { height: 1fr; }
    """

    def __init__(self, lines: LineStore, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.lines = lines
        self.follow = True
        self.search: str = ""
        self.current: int | None = None  # the line of the current search match
        self._cache: LRUCache[tuple[int, str], Strip] = LRUCache(512)
        self._shown = 0

    # --- data --------------------------------------------------------------------------------

    def sync(self) -> None:
        """Pick up lines appended to the store since the last call."""
        n = len(self.lines)
        if n == self._shown:
            return
        self._shown = n
        width = min(self.lines.max_len, 4200) + 1
        self.virtual_size = Size(width, n)
        if self.follow:
            self._to_tail()
            # The container may not have its final size yet on the first sync.
            self.call_after_refresh(self._to_tail)
        self.refresh()

    def _to_tail(self) -> None:
        if self.follow:
            self.scroll_to(y=self.max_scroll_y, animate=False)

    def on_resize(self) -> None:
        self._to_tail()

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        # Scrolling up detaches from the tail; reaching the bottom again re-attaches.
        if new_value < old_value and new_value < self.max_scroll_y:
            self.follow = False
        elif new_value >= self.max_scroll_y:
            self.follow = True

    def set_search(self, needle: str) -> None:
        self.search = needle
        self._cache.clear()
        self.refresh()

    def find(self, needle: str, backwards: bool = False) -> int | None:
        """Move to the next match of ``needle``; the line index, or None."""
        if needle != self.search:
            self.set_search(needle)
            start = int(self.scroll_y)
        elif self.current is not None:
            start = self.current + (0 if backwards else 1)
        else:
            start = int(self.scroll_y)
        found = self.lines.find(needle, start, backwards=backwards)
        self.current = found
        self._cache.clear()
        if found is not None:
            self.follow = False
            height = self.scrollable_content_region.height
            self.scroll_to(y=max(0, found - height // 2), animate=False)
        self.refresh()
        return found

    def clear_search(self) -> None:
        self.search = ""
        self.current = None
        self._cache.clear()
        self.refresh()

    # --- rendering ---------------------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        index = int(self.scroll_y) + y
        width = self.scrollable_content_region.width
        style = self.rich_style
        if index >= len(self.lines):
            return Strip.blank(width, style)
        strip = self._line_strip(index)
        return strip.crop_extend(int(self.scroll_x), int(self.scroll_x) + width, style)

    def _line_strip(self, index: int) -> Strip:
        key = (index, self.search)
        cached = self._cache.get(key)
        if cached is not None and index != self.current:
            return cached
        # Plain Text: run output is data, never markup.
        text = Text(clean_line(self.lines[index]), no_wrap=True, end="")
        if self.search:
            text.highlight_words([self.search], MATCH_STYLE,
                                 case_sensitive=self.search != self.search.lower())
        if index == self.current:
            text.stylize(CURRENT_STYLE)
        segments = list(text.render(self.app.console))
        strip = Strip(segments, text.cell_len)
        if not segments:
            strip = Strip([Segment("")], 0)
        self._cache[key] = strip
        return strip

    def visible_text(self) -> list[str]:
        """The cleaned lines now on screen (tests)."""
        top = int(self.scroll_y)
        height = self.scrollable_content_region.height
        return [clean_line(self.lines[i]) for i in range(top, min(top + height, len(self.lines)))]
