"""Command palette entries: the live screen's actions, searchable by name and tooltip."""

from __future__ import annotations

from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider


class ReviewCommands(Provider):
    def _actions(self) -> list[tuple[str, str, str]]:
        screen = self.screen
        bindings = getattr(screen, "PALETTE", None)
        if not bindings:
            return []
        return [(b.description, b.tooltip, b.action) for b in bindings]

    async def discover(self) -> Hits:
        for name, tooltip, action in self._actions():
            yield DiscoveryHit(name, partial(self.screen.run_action, action), help=tooltip)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, tooltip, action in self._actions():
            score = max(matcher.match(name), matcher.match(tooltip) * 0.5)
            if score > 0:
                yield Hit(score, matcher.highlight(name), partial(self.screen.run_action, action),
                          help=tooltip)
