"""The Agent column: the agent's words, its tool calls folded to one line, and its edits.

A batch folded at once (a replay's load, `holding()`) mounts only its newest entries, enough to
fill the column; the older ones are built but mounted only when the reviewer scrolls
to the top or selects one of their cards (`reveal`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager

from rich.text import Text
from textual.containers import VerticalScroll
from textual.reactive import reactive
from textual.widget import AwaitMount, Widget
from textual.widgets import Static

from portside.core.log import events as ev
from portside.core.safety.terminal_text import clean_line

from ..diffing import lexer_built
from ..model import CommandView, EditView
from .command_card import CommandCard
from .diff_card import DiffCard
from .scan_card import ScanCard

TOOL_PREVIEW = 60
RESULT_LINES = 40
HELD_CHUNK = 20  # entries mounted each time the reviewer scrolls to the top
MOUNT_HOLD_S = 1.0  # the most the screen waits for a new card to be whole before painting


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


class AgentColumn(VerticalScroll, can_focus=True):
    """Appends as events arrive; stays at the end until the reviewer scrolls up."""

    ALLOW_MAXIMIZE = False

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.calls: dict[str, ToolCall] = {}
        self.cards: dict[str, DiffCard | CommandCard] = {}
        self.older: list[Widget] = []  # built, not mounted: above the first mounted entry
        self.uncoloured: list[DiffCard] = []
        self._batch: list[Widget] | None = None
        # The card awaiting the reviewer: following the conversation keeps its top (title, risk
        # marks) in view rather than the column's end, which a tall card pushes them past.
        self.pinned: DiffCard | CommandCard | None = None
        self._mounting: set[asyncio.Task[None]] = set()
        self._follow_queued = False  # one follow per refresh, however many entries came

    # --- what is mounted ---------------------------------------------------------------------

    @contextmanager
    def holding(self) -> Iterator[None]:
        """Entries added inside are mounted at the end, in one batch, newest ones only. Their
        diffs wait for syntax colour (``colour_held``) when the lexer is not built yet."""
        self._batch = []
        try:
            yield
        finally:
            batch, self._batch = self._batch, None
            rows, keep = 0, len(batch)
            need = max(self.app.size.height, 24)
            while keep > 0 and rows < need:
                keep -= 1
                rows += _rows_estimate(batch[keep])
            if self.children:  # older entries already mounted: nothing may sit between
                keep = 0
            self.older.extend(batch[:keep])
            if self.older and not self.show_vertical_scrollbar:
                # Entries held back: the mounted ones overflow the column. Its scrollbar laid
                # out from the first pass, not added by a second layout of the whole screen.
                self.set_reactive(Widget.show_vertical_scrollbar, True)
            if batch[keep:]:
                self.mount_all(batch[keep:])
            if self.older:
                self.call_after_refresh(self._fill_view)

    def _put(self, widget: Widget) -> None:
        if self._batch is not None:
            if isinstance(widget, DiffCard) and not lexer_built(widget.diff.path):
                widget.diff.colour = False
                self.uncoloured.append(widget)
            self._batch.append(widget)
        elif isinstance(widget, DiffCard | CommandCard):
            # A card composes its children after it is mounted: the screen would lay out and
            # paint it empty first, then again whole. Held until it is whole: one layout, one
            # paint, with the card in it (the permission request -> card on screen latency).
            mounting = self.mount(widget)
            self.app._begin_batch()
            task = asyncio.get_running_loop().create_task(self._whole(mounting))
            self._mounting.add(task)
            task.add_done_callback(self._mounting.discard)
        else:
            self.mount(widget)

    async def _whole(self, mounting: AwaitMount) -> None:
        async def mounted() -> None:
            await mounting

        try:  # never holds the screen long: a card not whole by then is shown as it is
            await asyncio.wait_for(mounted(), MOUNT_HOLD_S)
        except TimeoutError:
            pass
        finally:
            self.app._end_batch()

    def colour_held(self) -> None:
        """Colour the diffs a held batch drew plain (the first one builds the lexer)."""
        cards, self.uncoloured = self.uncoloured, []
        for card in cards:
            card.body.colour()

    def reveal(self, widget: Widget | None = None, count: int = HELD_CHUNK) -> None:
        """Mount held entries: up to ``widget`` (all from it on), or the ``count`` newest."""
        if not self.older:
            return
        cut = (self.older.index(widget) if widget in self.older
               else max(0, len(self.older) - count) if widget is None else len(self.older))
        shown, self.older = self.older[cut:], self.older[:cut]
        if not shown:
            return
        first = self.children[0] if self.children else None
        self.mount_all(shown, before=first)
        if widget is None:
            # Keep the rows in view where they were: the new entries went in above them.
            self.call_after_refresh(self._keep_position, shown, self.scroll_y)

    def _fill_view(self, tries: int = 20) -> None:
        """Mount held entries while the mounted ones do not fill the column (the estimate was
        high, or the column grew): else there is no scrolling up to reach them."""
        if not self.older or not self.children or not tries:
            return
        if not any(w.outer_size.height for w in self.children):
            self.call_after_refresh(self._fill_view, tries - 1)  # not laid out yet
            return
        if self.max_scroll_y <= 0:
            self.reveal()
            self.call_after_refresh(self._fill_view, tries - 1)

    def on_resize(self) -> None:
        if self.older:
            self.call_after_refresh(self._fill_view)

    def _keep_position(self, shown: list[Widget], y: float, tries: int = 20) -> None:
        if tries and not all(w.outer_size.height for w in shown):
            # Not laid out yet (an after-refresh callback can run before the layout).
            self.call_after_refresh(self._keep_position, shown, y, tries - 1)
            return
        added = sum(w.outer_size.height for w in shown)
        self.scroll_to(y=y + added, animate=False)

    def scroll_to_card(self, card: Widget) -> None:
        if card in self.older:
            self.reveal(card)
            self.call_after_refresh(self.scroll_to_widget, card, animate=False, top=True)
        else:
            self.scroll_to_widget(card, animate=False, top=True)

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        if new <= 0 and old > 0 and self.older:
            self.reveal()

    def add_event(self, e: ev.Event, edit: EditView | CommandView | None = None
                  ) -> DiffCard | CommandCard | None:
        # Follow the conversation unless the reviewer scrolled up to read something.
        if self.scroll_y >= self.max_scroll_y - 1:
            # Anchored until then, so the layout that adds the entry already shows it (a card
            # below the fold cost one more layout and paint before it was on screen); _follow
            # then puts an awaiting card's top in view, where it is taller than the column.
            # Only once the column overflows: Textual anchors a shorter one above its top.
            if self.max_scroll_y > 0:
                self.anchor()
            self._follow_later()
        return self._add(e, edit)

    def bring_into_view(self, card: DiffCard | CommandCard) -> None:
        """Pin a card awaiting a decision and show it from its top, wherever the reviewer was."""
        self.pinned = card
        self._follow_later()

    def _follow_later(self) -> None:
        # A replay's load adds ~75 entries at once: one follow after the refresh, not one per
        # entry (each scrolled to the end again, ~0.15 ms, and Textual inspected each callback's
        # signature anew). _follow reads the column as it is then, so one does what many did.
        if not self._follow_queued:
            self._follow_queued = True
            self.call_after_refresh(self._follow_queued_now)

    def _follow_queued_now(self) -> None:
        self._follow_queued = False
        self._follow()

    def _follow(self, tries: int = 20) -> None:
        self.anchor(False)
        card = self.pinned
        if card is None or card.view.decided is not None or card.parent is not self:
            self.pinned = None
            self.scroll_end(animate=False)
            return
        if tries and not card.outer_size.height:  # not laid out yet
            self.call_after_refresh(self._follow, tries - 1)
            return
        self.scroll_to(y=min(card.virtual_region.y, self.max_scroll_y), animate=False,
                       immediate=True)

    def _add(self, e: ev.Event, edit: EditView | CommandView | None
             ) -> DiffCard | CommandCard | None:
        match e:
            case ev.AgentText():
                self._put(Static(safe_text(e.text), classes="agent-text"))
            case ev.AgentToolCall():
                call = ToolCall(e)
                self.calls[e.call_id] = call
                self._put(call)
            case ev.AgentToolResult() if e.call_id in self.calls:
                call = self.calls[e.call_id]
                call.result = e
                call.refresh(layout=True)
            case ev.AgentClaimed():
                t = Text("agent claims success: ", style="bold #e5c07b")
                t.append_text(safe_text(e.summary))
                t.append("\nv verdict · the checks decide what the claim is worth", style="dim")
                self._put(Static(t, classes="agent-claim"))
            case ev.CommandProposed() | ev.EditProposed() if isinstance(edit, CommandView):
                command = CommandCard(edit, id=f"card-{_safe_id(edit.event.command_id)}")
                self.cards[command.edit_id] = command
                self._put(command)
                return command
            case ev.EditProposed() if isinstance(edit, EditView):
                card = DiffCard(edit, id=f"card-{_safe_id(e.edit_id)}")
                self.cards[e.edit_id] = card
                self._put(card)
                return card
            case ev.Intervention() if e.action == "message":
                t = Text("you → agent: ", style="bold #c678dd")
                t.append_text(safe_text(e.note))
                self._put(Static(t, classes="agent-message"))
            case ev.ProjectScanned():
                # The screen knows whether the session has an agent (whose task holds the list).
                try:
                    agent = bool(self.screen.has_agent())  # type: ignore[attr-defined]
                except Exception:  # no screen (yet), or one that does not say: as before
                    agent = True
                self._put(ScanCard(e, agent=agent))
            case ev.SessionState() if e.state not in ("running", "paused"):
                self._put(Static(Text(f"· {clean_line(e.state)} {clean_line(e.detail)}",
                                       style="dim"), classes="agent-state"))
        return None


def _safe_id(raw: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in raw)


def _rows_estimate(widget: Widget) -> int:
    """Rows an entry takes at least (a card: its frame and a few diff rows)."""
    if isinstance(widget, DiffCard | CommandCard):
        return 8  # frame, title, hint and a few rows of change (too many: _fill_view mounts more)
    if isinstance(widget, ToolCall):
        return 1
    content = widget.content if isinstance(widget, Static) else None
    return 1 + (content.plain.count("\n") if isinstance(content, Text) else 0)
