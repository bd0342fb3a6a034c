"""A fixed-height line of Text that repaints without a layout pass.

Static.update() asks for a new layout every time; a header or status line that changes several
times a second (elapsed time, a log's line count under a flood) must only repaint itself.
"""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget


class TextLine(Widget):
    DEFAULT_CSS = """
    TextLine { height: 1; }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._text = Text()

    def set(self, text: Text) -> None:
        if text.plain == self._text.plain and text.spans == self._text.spans:
            return
        self._text = text
        self.refresh()

    @property
    def text(self) -> Text:
        return self._text

    def render(self) -> Text:
        return self._text
