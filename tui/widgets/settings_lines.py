"""The Checks card's lines for a settings alarm (optimizer-changed, data-changed,
precision-changed): one line per changed setting, candidate against reference."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from portside.core.checks.settings import show
from portside.core.safety.terminal_text import clean_line


def settings_text(evidence: dict[str, Any]) -> Text | None:
    """None when the evidence is not a settings alarm's."""
    changes = evidence.get("changes")
    if not isinstance(changes, list) or not changes:
        return None
    t = Text()
    for c in changes[:12]:
        if not isinstance(c, dict):
            continue
        where = f"{c.get('where')} " if c.get("where") else ""
        t.append(f"  {clean_line(where + str(c.get('setting')), 60)}\n", style="bold")
        t.append("    cand ", style="bold red")
        t.append(clean_line(show(c.get("candidate")), 80))
        t.append("  ref ", style="bold")
        t.append(clean_line(show(c.get("reference")), 80) + "\n")
    if evidence.get("allowed"):
        t.append("  allowed by criteria settings.allow\n", style="dim")
    return t
