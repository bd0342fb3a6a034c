"""The project's portability scan (``project.scanned``), first in the Agent column: what will not
move to a TPU as it is, grouped by what a port must do, each place as file:line."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from portside.core.log import events as ev
from portside.core.safety.terminal_text import clean_line

SHOWN = 40  # places listed on the card; the report and `portside scan` list every one


def scan_text(e: ev.ProjectScanned, shown: int = SHOWN, agent: bool = True) -> Text:
    """The card's text (plain Text: every path and construct comes from the project); the
    agent's task carries the list only where there is an agent."""
    t = Text()
    t.append("⌕ portability scan", style="bold #61afef")
    if not e.total:
        t.append(f" · nothing to port beyond the device in {e.files} file(s)", style="dim")
        return t
    t.append(f" · {e.total} place(s) will not move as they are ({e.files} file(s) "
             "scanned)\n")
    t.append(" · ".join(f"{k} {n}" for k, n in e.counts.items()) + "\n", style="bold")
    groups: dict[tuple[str, str], list[ev.ScanFinding]] = {}
    for f in e.findings[:shown]:
        groups.setdefault((f.kind, f.action), []).append(f)
    for (kind, action), places in groups.items():
        t.append(clean_line(kind), style="bold #e5c07b")
        t.append(f" — {clean_line(action)}\n", style="dim")
        for f in places:
            t.append(f"  {clean_line(f.path)}:{f.line} ")
            t.append(f"{clean_line(f.what)}\n", style="#9da5b4")
    left = e.total - min(shown, len(e.findings))
    if left > 0:
        t.append(f"… {left} more: the report lists them, `portside scan` too\n", style="dim")
    t.append("z zooms this column" + (" · the agent's task holds the same list" if agent
                                      else " · `portside scan` prints the same list"),
             style="dim")
    return t


class ScanCard(Static):
    def __init__(self, e: ev.ProjectScanned, agent: bool = True) -> None:
        super().__init__(scan_text(e, agent=agent), classes="scan-card")
        self.event = e
