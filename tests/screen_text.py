"""The screen as plain text lines, for assertions that must not depend on SVG output."""

from __future__ import annotations

from textual.app import App


def screen_lines(app: App) -> list[str]:
    strips = app.screen._compositor.render_strips()
    return ["".join(seg.text for seg in strip) for strip in strips]


def screen_text(app: App) -> str:
    return "\n".join(screen_lines(app))
