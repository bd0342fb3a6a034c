"""A proposed shell command as a card: the command, where it runs and why, and the keys.

Answered with the same keys as an edit (a / r / e); ``e`` edits the command itself. It has the
``split`` / ``full`` switches of a diff card so the screen's view keys need no special case
(a command has one view).
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Static

from portside.core.safety.terminal_text import clean_line

from ..model import CommandView
from .proposal_card import ProposalCard, status_style


class CommandCard(ProposalCard):
    def __init__(self, view: CommandView, *, id: str | None = None) -> None:
        super().__init__(id=id, classes="diff-card command-card")
        self.view = view

    @property
    def edit_id(self) -> str:
        """The id the gate's a / r / e answer (the command_id)."""
        return self.view.event.command_id

    def compose(self) -> ComposeResult:
        e = self.view.event
        yield Static(self._title(), classes="card-title")
        where = Text("in ", style="dim")
        where.append(clean_line(e.cwd or "."), style="#e5c07b")
        if e.description:
            where.append(" · ", style="dim")
            where.append(clean_line(e.description))
        yield Static(where, classes="card-rationale")
        body = Text()
        for i, line in enumerate(e.command.splitlines() or [""]):
            body.append("$ " if i == 0 else "  ", style="bold #98c379")
            body.append(clean_line(line) + "\n")
        body.rstrip()
        yield Static(body, classes="command-body")
        yield Static(self._hint(), classes="card-hint")

    def _title(self) -> Text:
        t = Text()
        t.append(f"{self.ordinal('command')} ", style="bold")
        first = (self.view.event.command.splitlines() or [""])[0]
        t.append(clean_line(first, 60), style="bold #98c379")
        status = self.view.status
        t.append(f"  {status}", style=status_style(status, self.view.decided is not None))
        return t

    def _hint(self) -> Text:
        if self.view.decided is not None:
            return Text("")
        return Text("a approve (run it) · r reject · e edit the command", style="dim")

    def visible_text(self) -> list[str]:
        """The command's lines as shown (tests)."""
        return [str(self.query_one(".command-body", Static).render())]
