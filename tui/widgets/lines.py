"""Helpers shared by the Line-API views (run log, diff body)."""

from __future__ import annotations

from rich.cells import cell_len
from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from rich.text import Span, Text
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

EMPTY = Strip([Segment("")], 0)

Frame = tuple[Style, int, int, int]  # the view's style, width, scroll x, scroll y


def frame(view: ScrollView) -> Frame:
    """What every row of a frame needs, read once per frame (in ``render_lines``) rather than
    once per row: the style and the geometry both walk the DOM."""
    return (view.rich_style, view.scrollable_content_region.width, int(view.scroll_x),
            int(view.scroll_y))


def text_strip(text: Text, console: Console) -> Strip:
    """One row of Text as a Strip (no wrapping: the view crops and scrolls sideways)."""
    if not text.spans and text.style:
        # Text.render drops the base style of a Text without spans.
        text = Text(text.plain, spans=[Span(0, len(text.plain), text.style)])
    segments = list(text.render(console))
    return Strip(segments, text.cell_len) if segments else EMPTY


def plain_strip(line: str) -> Strip:
    """An unstyled row without going through rich's renderer (the common case of a log)."""
    return Strip([Segment(line)], cell_len(line)) if line else EMPTY


def set_virtual_size(view: ScrollView, size: Size) -> None:
    """Change what ``view`` scrolls over without a layout of the whole screen.

    ``virtual_size`` is a layout reactive: assigning it re-arranges every widget on the screen,
    which under a flood of log lines costs more than drawing them. A Line-API view's own box does
    not depend on it, so only its scrollbars and scroll limits need to follow. (Showing or hiding
    a scrollbar still asks for a layout, as it must.)
    """
    old = view.virtual_size
    if size == old:
        return
    update = getattr(view, "_scroll_update", None)  # Textual's own scrollbar refresh
    if update is None or not view.is_mounted:
        view.virtual_size = size
        return
    view.set_reactive(ScrollView.virtual_size, size)
    if view.show_vertical_scrollbar and size.width == old.width and size.height >= old.height:
        # Only taller (a log growing): no scrollbar can appear or go, and the horizontal one
        # need not be redrawn, as Textual's full update would, at every batch.
        view.vertical_scrollbar.window_virtual_size = size.height
    else:
        update(size)
    view.refresh()
