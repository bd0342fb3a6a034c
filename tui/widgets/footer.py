"""The key footer of the review screens, drawn by one widget.

Textual's Footer mounts a widget per key (13 on the replay screen: each styled, laid out and
rendered on its own, about 45 ms of a replay's first frame, measured by swapping it out) and
mounts them all again whenever the bindings change. This draws the same line (the same keys,
styles and command-palette key docked right) as one Text, and maps a click back to its key.
Binding groups are not combined: the review screens define none.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from rich.style import Style
from rich.text import Text
from textual import events
from textual.widget import Widget


class Key(NamedTuple):
    key: str
    display: str
    description: str
    enabled: bool
    tooltip: str


class ReviewFooter(Widget, can_focus=False):
    COMPONENT_CLASSES = {"review-footer--key", "review-footer--description",
                         "review-footer--hover", "review-footer--border"}
    DEFAULT_CSS = """
    ReviewFooter {
        dock: bottom;
        height: 1;
        color: $footer-foreground;
        background: $footer-background;
    }
    ReviewFooter > .review-footer--key {
        color: $footer-key-foreground;
        background: $footer-key-background;
        text-style: bold;
    }
    ReviewFooter > .review-footer--description {
        color: $footer-description-foreground;
        background: $footer-description-background;
    }
    ReviewFooter > .review-footer--hover {
        color: $footer-key-foreground;
        background: $block-hover-background;
    }
    ReviewFooter > .review-footer--border { color: $foreground 20%; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._keys: tuple[Key, ...] = ()
        self._palette: Key | None = None
        self._spans: list[tuple[int, int, Key]] = []  # x range on screen → key, last drawn
        self._hover: str | None = None

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)
        self._bindings_changed(self.screen)

    def _bindings_changed(self, screen: Any) -> None:
        keys, palette = self._read(screen)
        if (keys, palette) != (self._keys, self._palette):
            self._keys, self._palette = keys, palette
            self.refresh()

    def _read(self, screen: Any) -> tuple[tuple[Key, ...], Key | None]:
        """The keys Textual's Footer would show: one per action, in binding order, and the
        command palette's when the app has one."""
        app = self.app
        keys: list[Key] = []
        actions: set[str] = set()
        active = screen.active_bindings
        for _node, binding, enabled, tooltip in active.values():
            if binding.show and binding.action not in actions:
                actions.add(binding.action)
                keys.append(Key(binding.key, app.get_key_display(binding),
                                binding.description, enabled, tooltip))
        palette = None
        if app.ENABLE_COMMAND_PALETTE and app.COMMAND_PALETTE_BINDING in active:
            _node, binding, enabled, tooltip = active[app.COMMAND_PALETTE_BINDING]
            palette = Key(binding.key, app.get_key_display(binding), binding.description,
                          enabled, binding.tooltip or binding.description)
        return tuple(keys), palette

    # --- drawing ------------------------------------------------------------------------------

    def _styles(self, k: Key) -> tuple[Style, Style]:
        key = self.get_component_rich_style("review-footer--key")
        desc = self.get_component_rich_style("review-footer--description")
        if k.key == self._hover and k.enabled:
            hover = self.get_component_rich_style("review-footer--hover")
            key, desc = key + hover, desc + hover
        if not k.enabled:
            key, desc = key + Style(dim=True), desc + Style(dim=True)
        return key, desc

    def render(self) -> Text:
        width = self.size.width
        line = Text(no_wrap=True, overflow="crop", end="")
        spans: list[tuple[int, int, Key]] = []
        for k in self._keys:
            key, desc = self._styles(k)
            x = line.cell_len
            line.append(f" {k.display} ", key)
            if k.description:
                line.append(f"{k.description} ", desc)
            spans.append((x, line.cell_len, k))
        if self._palette is not None:
            k = self._palette
            key, desc = self._styles(k)
            right = Text.assemble(("▏", self.get_component_rich_style("review-footer--border")),
                                  (k.display, key), (f" {k.description}", desc), " ")
            room = max(0, width - right.cell_len)
            line.truncate(room, pad=True)
            spans = [(a, min(b, room), s) for a, b, s in spans if a < room]
            spans.append((room, width, k))
            line.append_text(right)
        self._spans = spans
        return line

    # --- mouse --------------------------------------------------------------------------------

    def _at(self, x: int) -> Key | None:
        return next((k for a, b, k in self._spans if a <= x < b), None)

    def on_mouse_down(self, event: events.MouseDown) -> None:
        k = self._at(event.x)
        if k is None:
            return
        if k.enabled:
            self.app.simulate_key(k.key)
        else:
            self.app.bell()

    def on_mouse_move(self, event: events.MouseMove) -> None:
        k = self._at(event.x)
        hover = k.key if k is not None else None
        if hover != self._hover:
            self._hover = hover
            self.tooltip = (k.tooltip or k.description) if k is not None else None
            self.refresh()

    def on_leave(self, event: events.Leave) -> None:
        if self._hover is not None:
            self._hover = None
            self.tooltip = None
            self.refresh()
