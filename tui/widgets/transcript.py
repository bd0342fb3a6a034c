"""The Agent column: the agent's words, its tool calls folded to one line, and its edits."""

from __future__ import annotations

import json

from rich.text import Text
from textual.containers import VerticalScroll
from textual.reactive import reactive
from textual.widgets import Static

from portside.core import events as ev
from portside.core.textsafe import clean_line

from ..model import CommandView, EditView
from .command_card import CommandCard
from .diff_card import DiffCard

TOOL_PREVIEW = 60
RESULT_LINES = 40


def safe_text(text: str, style: str = "") -> Text:
    """Multi-line untrusted text as plain Text (each line cleaned; never markup)."""
    return Text("\n".join(clean_line(line) for line in text.splitlines()), style=style)


class ToolCall(Static, can_focus=True):
    """`▸ name args…` on one line; enter or a click unfolds the input and the result."""

    expanded: reactive[bool] = reactive(False)

    def __init__(self, call: ev.AgentToolCall) -> None:
        super().__init__(classes="tool-call")
        self.call = call
        self.result: ev.AgentToolResult | None = None

    def render(self) -> Text:
        args = json.dumps(self.call.input, sort_keys=True, ensure_ascii=False)
        mark = "▾" if self.expanded else "▸"
        t = Text()
        t.append(f"{mark} ", style="bold #6aa0d8")
        t.append(clean_line(self.call.name), style="bold")
        if self.result is not None:
            t.append(" ✖" if self.result.is_error else " ✓",
                     style="red" if self.result.is_error else "green")
        if not self.expanded:
            preview = clean_line(args, TOOL_PREVIEW)
            if len(args) > TOOL_PREVIEW:
                preview = preview[:TOOL_PREVIEW] + "…"
            t.append(f" {preview}", style="dim")
            return t
        t.append("\n")
        pretty = json.dumps(self.call.input, indent=2, sort_keys=True, ensure_ascii=False)
        t.append_text(safe_text(pretty, "#9da5b4"))
        if self.result is not None:
            lines = self.result.content.splitlines()
            t.append("\n── result ──\n", style="dim")
            t.append_text(safe_text("\n".join(lines[:RESULT_LINES])))
            if len(lines) > RESULT_LINES:
                t.append(f"\n… {len(lines) - RESULT_LINES} more lines", style="dim")
        return t

    def on_click(self) -> None:
        self.expanded = not self.expanded

    def key_enter(self) -> None:
        self.expanded = not self.expanded


class Transcript(VerticalScroll, can_focus=True):
    """Appends as events arrive; stays at the end until the reviewer scrolls up."""

    ALLOW_MAXIMIZE = False

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.calls: dict[str, ToolCall] = {}
        self.cards: dict[str, DiffCard | CommandCard] = {}

    def add_event(self, e: ev.Event, edit: EditView | CommandView | None = None
                  ) -> DiffCard | CommandCard | None:
        # Follow the conversation unless the reviewer scrolled up to read something.
        if self.scroll_y >= self.max_scroll_y - 1:
            self.call_after_refresh(self.scroll_end, animate=False)
        return self._add(e, edit)

    def _add(self, e: ev.Event, edit: EditView | CommandView | None
             ) -> DiffCard | CommandCard | None:
        match e:
            case ev.AgentText():
                self.mount(Static(safe_text(e.text), classes="agent-text"))
            case ev.AgentToolCall():
                call = ToolCall(e)
                self.calls[e.call_id] = call
                self.mount(call)
            case ev.AgentToolResult() if e.call_id in self.calls:
                call = self.calls[e.call_id]
                call.result = e
                call.refresh(layout=True)
            case ev.AgentClaimed():
                t = Text("agent claims success: ", style="bold #e5c07b")
                t.append_text(safe_text(e.summary))
                t.append("\nv verdict · the checks decide what the claim is worth", style="dim")
                self.mount(Static(t, classes="agent-claim"))
            case ev.CommandProposed() | ev.EditProposed() if isinstance(edit, CommandView):
                command = CommandCard(edit, id=f"card-{_safe_id(edit.event.command_id)}")
                self.cards[command.edit_id] = command
                self.mount(command)
                return command
            case ev.EditProposed() if isinstance(edit, EditView):
                card = DiffCard(edit, id=f"card-{_safe_id(e.edit_id)}")
                self.cards[e.edit_id] = card
                self.mount(card)
                return card
            case ev.Intervention() if e.action == "message":
                t = Text("you → agent: ", style="bold #c678dd")
                t.append_text(safe_text(e.note))
                self.mount(Static(t, classes="agent-message"))
            case ev.SessionState() if e.state not in ("running", "paused"):
                self.mount(Static(Text(f"· {clean_line(e.state)} {clean_line(e.detail)}",
                                       style="dim"), classes="agent-state"))
        return None


def _safe_id(raw: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in raw)
