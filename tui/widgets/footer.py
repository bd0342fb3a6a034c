"""The key footer, recomposed only when what it shows changed.

Textual's Footer rebuilds all its keys on every bindings signal (a screen resume, each focus
change): three times while a replay's first frame is built, each a mount of ~20 keys with their
styles. The keys it would show are compared first.
"""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.widgets import Footer
from textual.widgets._footer import FooterKey


class ReviewFooter(Footer):
    _shown: Any = None

    def _signature(self) -> Any:
        bindings = tuple((key, b.key, b.description, b.action, b.show, b.key_display,
                          getattr(b, "group", None),
                          enabled, tooltip)
                         for key, (_node, b, enabled, tooltip)
                         in self.screen.active_bindings.items())
        return (bindings, self.compact, getattr(self, "_bindings_ready", True))

    def compose(self) -> ComposeResult:
        # A FooterKey is born compact (its watcher restyles it on mount) and its binding to
        # the footer's `compact` flips that: two restylings of every key. Set before mount,
        # neither changes anything. (The command palette's key is not bound: it stays compact.)
        for widget in super().compose():
            if isinstance(widget, FooterKey):
                compact = widget.has_class("-command-palette") or self.compact
                widget.set_reactive(FooterKey.compact, compact)
                widget.set_class(compact, "-compact", update=False)
            yield widget

    async def recompose(self) -> None:
        if not self.is_attached:
            return
        shown = self._signature()
        if shown == self._shown:
            return
        self._shown = shown
        await super().recompose()
