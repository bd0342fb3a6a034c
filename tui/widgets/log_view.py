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
from textual.geometry import Region, Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from portside.core.safety.terminal_text import clean_line

from ..linestore import LineStore
from .lines import Frame, frame, plain_strip, set_virtual_size, text_strip

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
        self._cache: LRUCache[tuple[int, str, bool, int, int, Style], Strip] = LRUCache(256)
        self._shown = 0
        self._frame: Frame = (Style(), 0, 0, 0)

    # --- data --------------------------------------------------------------------------------

    def sync(self) -> None:
        """Pick up lines appended to the store since the last call."""
        n = len(self.lines)
        if n == self._shown:
            return
        self._shown = n
        width = min(self.lines.max_len, 4200) + 1
        # Not a layout of the screen per batch: the log's box does not depend on its length.
        set_virtual_size(self, Size(width, n))
        if self.follow:
            self._to_tail()
            # The container may not have its final size yet on the first sync.
            self.call_after_refresh(self._to_tail)
        self.refresh()

    def _get_scrollable_region(self, region: Region) -> Region:
        # Called as the compositor lays this view out in ``region``: its scrollbars decided
        # here, from its extent, as Textual decides them after the layout (overflow auto).
        # Else the first layout of a log leaves them out, then shows them, and that asks
        # for a second layout of the whole screen.
        styles = self.styles
        if styles.overflow_x == styles.overflow_y == "auto" and not getattr(self, "_scrollbar_changes", True):
            width, height = self.virtual_size
            self.set_reactive(ScrollView.show_horizontal_scrollbar, width > region.width)
            self.set_reactive(ScrollView.show_vertical_scrollbar, height > region.height)
        return super()._get_scrollable_region(region)

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

    def show_line(self, index: int) -> None:
        """Mark line ``index`` and scroll it to a third from the top (stops following)."""
        if not len(self.lines):
            return
        index = max(0, min(index, len(self.lines) - 1))
        self.sync()
        self.follow = False
        self.current = index
        self._cache.clear()
        height = self.scrollable_content_region.height or 10
        self.scroll_to(y=max(0, index - height // 3), animate=False)
        self.refresh()

    def clear_search(self) -> None:
        self.search = ""
        self.current = None
        self._cache.clear()
        self.refresh()

    # --- rendering ---------------------------------------------------------------------------

    def render_lines(self, crop: Region) -> list[Strip]:
        self._frame = frame(self)
        return super().render_lines(crop)

    def render_line(self, y: int) -> Strip:
        style, width, sx, sy = self._frame
        index = sy + y
        if index >= len(self.lines):
            return Strip.blank(width, style)
        # The finished row is cached, not a strip to crop per frame: under a flood every row
        # is new each frame, and each derived Strip is garbage the collector has to walk.
        key = (index, self.search, index == self.current, sx, width, style)
        strip = self._cache.get(key)
        if strip is None:
            strip = self._cache[key] = self._render_row(index, sx, width, style)
        return strip

    def _render_row(self, index: int, sx: int, width: int, style: Style) -> Strip:
        line = clean_line(self.lines[index])
        if not self.search and index != self.current:
            # Run output is data, never markup: nothing to style but the widget's colours.
            if line.isascii():  # one cell per character: crop the string itself
                return Strip([Segment(line[sx:sx + width].ljust(width), style)], width)
            return plain_strip(line).apply_style(style).crop_extend(sx, sx + width, style)
        text = Text(line, no_wrap=True, end="")
        if index == self.current:
            text.stylize(CURRENT_STYLE)  # first: the match marks must stay visible on top
        if self.search:
            text.highlight_words([self.search], MATCH_STYLE,
                                 case_sensitive=self.search != self.search.lower())
        strip = text_strip(text, self.app.console).apply_style(style)
        return strip.crop_extend(sx, sx + width, style)

    def visible_text(self) -> list[str]:
        """The cleaned lines now on screen (tests)."""
        top = int(self.scroll_y)
        height = self.scrollable_content_region.height
        return [clean_line(self.lines[i]) for i in range(top, min(top + height, len(self.lines)))]
