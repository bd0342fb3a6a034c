"""The Runs column: one tab per run, a status line, the log tail, search with `/`.

Only what the screen shows is mounted: the tab strip is one widget (run_tabs.py) and a run's
pane (status, command, log, search box) is created the first time its tab is shown, so opening a
replay of a session with hundreds of runs mounts one pane, not hundreds.
"""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import Input, Static

from portside.core.log.render import reused_text

from ..model import RunView
from .log_view import LogView
from .run_tabs import RunTabs
from .text_line import TextLine


def pane_id(run_id: str) -> str:
    return "run-" + "".join(c if c.isalnum() or c in "-_" else "_" for c in run_id)


class RunPane(Vertical):
    BINDINGS = [
        Binding("slash", "search", "Search log", id="run.search",
                tooltip="Search this run's log (enter: next match, wrapping; esc: close)"),
        Binding("G", "tail", "Follow tail", id="run.tail", show=False,
                tooltip="Jump to the end of the log and follow new lines again"),
    ]

    def __init__(self, run: RunView) -> None:
        super().__init__(id=pane_id(run.run_id))
        self.run = run
        self.log_view = LogView(run.lines, id=f"log-{pane_id(run.run_id)}")
        self._version = -1

    @staticmethod
    def tab_label(run: RunView) -> str:
        return f"{run.label} {run.mark}"

    def compose(self) -> ComposeResult:
        with Vertical():
            yield TextLine(classes="run-status")
            command = Static(Text(run_command(self.run), style="dim"), classes="run-command")
            if self.run.reused_from:  # where it came from, wrapped: not cut at the pane's width
                command.styles.height = "auto"
            yield command
            yield self.log_view
            yield Input(placeholder="search this log · enter next · esc close",
                        classes="run-search")

    def on_mount(self) -> None:
        self.query_one(".run-search", Input).display = False
        # The log's length before the first layout: its scrollbar is placed by that layout,
        # not by a second one after the first tick.
        self._version = self.run.version
        self.log_view.sync()

    def sync(self, now: float) -> None:
        """Redraw what changed since the last call (called on the screen's refresh tick)."""
        self.query_one(".run-status", TextLine).set(Text(self.run.status_line(now)))
        if self.run.version != self._version and self.log_view.size.height:
            self._version = self.run.version
            self.log_view.sync()

    def action_search(self) -> None:
        box = self.query_one(".run-search", Input)
        box.display = True
        box.focus()

    def action_tail(self) -> None:
        self.log_view.follow = True
        self.log_view.scroll_end(animate=False)

    @on(Input.Submitted, ".run-search")
    def _next_match(self, event: Input.Submitted) -> None:
        event.stop()
        found = self.log_view.find(event.value)
        if event.value and found is None:
            self.notify(f"not found in {self.run.label}: {event.value}", severity="warning")

    def key_escape(self) -> None:
        box = self.query_one(".run-search", Input)
        if box.display:
            box.display = False
            self.log_view.clear_search()
            self.log_view.focus()


def run_command(run: RunView) -> str:
    cmd = run.command if len(run.command) <= 200 else run.command[:199] + "…"
    reused = f"↺ {reused_text(run.reused_from)}, not run again\n" if run.reused_from else ""
    return f"{reused}$ {cmd}  ({run.target})"


class RunsPanel(Vertical):
    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.runs: dict[str, RunView] = {}
        self.panes: dict[str, RunPane] = {}  # the runs whose tab has been shown
        self._tabs = RunTabs(lambda run_id: RunPane.tab_label(self.runs[run_id]), id="run-tabs")
        self._body = Vertical(id="run-body")
        self._show_pending = False
        self._relabel = False

    def compose(self) -> ComposeResult:
        yield Static(Text("no runs yet", style="dim"), classes="empty")
        yield self._tabs
        yield self._body

    def add_run(self, run: RunView) -> None:
        self.runs[run.run_id] = run
        if len(self.runs) == 1:
            self.query_one(".empty").display = False
        self._tabs.add(run.run_id, redraw=False)  # select() redraws the strip, once a batch
        # The newest run is what the reviewer wants to see. Its pane is made once the batch
        # that started it is folded: a batch starting many runs mounts one pane.
        self.select(run.run_id)

    def select(self, run_id: str) -> None:
        """Show ``run_id``'s tab (its pane is mounted on the next turn, if new)."""
        if run_id not in self.runs:
            return
        # No redraw here: a batch starting many runs (a replay's load: 90) redraws the strip
        # once, in _show_active, not once per run.
        self._tabs.active = run_id
        if not self._show_pending:
            self._show_pending = True
            self.call_later(self._show_active)

    def _show_active(self) -> None:
        self._show_pending = False
        self._tabs.refresh()
        run_id = self._tabs.active
        if run_id is None:
            return
        self.pane(run_id)
        for other_id, pane in self.panes.items():
            pane.display = other_id == run_id

    def pane(self, run_id: str) -> RunPane:
        """``run_id``'s pane, mounted now if it was never shown (hidden until selected)."""
        pane = self.panes.get(run_id)
        if pane is None:
            pane = self.panes[run_id] = RunPane(self.runs[run_id])
            pane.display = run_id == self._tabs.active
            self._body.mount(pane)
        return pane

    def search(self, run_id: str) -> None:
        """Open the search box of ``run_id``'s log (once its pane is up)."""
        pane = self.pane(run_id)
        if pane.is_mounted:
            pane.action_search()
        else:
            self.call_after_refresh(pane.action_search)

    def on_run_tabs_activated(self, message: RunTabs.Activated) -> None:
        message.stop()
        self.select(message.run_id)

    def relabel(self) -> None:
        """Redraw the tab strip on the next sync (a run finished): labels are read from the
        runs on each render, so many finishing in one batch cost one redraw."""
        self._relabel = True

    def sync(self, now: float) -> None:
        if self._relabel:
            self._relabel = False
            self._tabs.refresh()
        # Only the visible tab renders; a hidden one catches up when it is shown.
        run_id = self.active_run_id
        pane = self.panes.get(run_id) if run_id else None
        if pane is not None and pane.is_mounted and pane.display:
            pane.sync(now)

    @property
    def tabs(self) -> RunTabs:
        return self._tabs

    @property
    def active_run_id(self) -> str | None:
        return self._tabs.active

    def active_log(self) -> LogView | None:
        run_id = self.active_run_id
        pane = self.panes.get(run_id) if run_id else None
        return pane.log_view if pane is not None and pane.display else None
