"""The Runs column: one tab per run, a status line, the log tail, search with `/`."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import Input, Static, TabbedContent, TabPane

from ..model import RunView
from .log_view import LogView
from .text_line import TextLine


def pane_id(run_id: str) -> str:
    return "run-" + "".join(c if c.isalnum() or c in "-_" else "_" for c in run_id)


class RunPane(TabPane):
    BINDINGS = [
        Binding("slash", "search", "Search log", id="run.search",
                tooltip="Search this run's log (enter: next match, wrapping; esc: close)"),
        Binding("G", "tail", "Follow tail", id="run.tail", show=False,
                tooltip="Jump to the end of the log and follow new lines again"),
    ]

    def __init__(self, run: RunView) -> None:
        super().__init__(self.tab_label(run), id=pane_id(run.run_id))
        self.run = run
        self.log_view = LogView(run.lines, id=f"log-{pane_id(run.run_id)}")
        self._version = -1

    @staticmethod
    def tab_label(run: RunView) -> str:
        return f"{run.label} {run.mark}"

    def compose(self) -> ComposeResult:
        with Vertical():
            yield TextLine(classes="run-status")
            yield Static(Text(run_command(self.run), style="dim"), classes="run-command")
            yield self.log_view
            yield Input(placeholder="search this log · enter next · esc close",
                        classes="run-search")

    def on_mount(self) -> None:
        self.query_one(".run-search", Input).display = False

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
    return f"$ {cmd}  ({run.target})"


class RunsPanel(Vertical):
    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.panes: dict[str, RunPane] = {}

    def compose(self) -> ComposeResult:
        yield Static(Text("no runs yet", style="dim"), classes="empty")
        yield TabbedContent(id="run-tabs")

    def add_run(self, run: RunView) -> None:
        pane = RunPane(run)
        self.panes[run.run_id] = pane
        self.query_one(".empty").display = False
        tabs = self.query_one(TabbedContent)
        tabs.add_pane(pane)
        # The newest run is what the reviewer wants to see (once its tab exists).
        self.call_after_refresh(self._activate, pane)

    def _activate(self, pane: RunPane, tries: int = 20) -> None:
        if pane.id is None or self.panes.get(pane.run.run_id) is not pane:
            return
        if pane.is_mounted:
            # Only if no newer run took the front meanwhile.
            if list(self.panes.values())[-1] is pane:
                self.query_one(TabbedContent).active = pane.id
        elif tries:
            self.call_after_refresh(self._activate, pane, tries - 1)

    def update_label(self, run: RunView) -> bool:
        """False while the tab is still being mounted (the caller retries on the next tick)."""
        pane = self.panes.get(run.run_id)
        if pane is None or pane.id is None:
            return True
        try:
            self.query_one(TabbedContent).get_tab(pane.id).label = RunPane.tab_label(run)
        except Exception:
            return False
        return True

    def sync(self, now: float) -> None:
        # Only the visible tab renders; a hidden one catches up when it is shown.
        run_id = self.active_run_id
        pane = self.panes.get(run_id) if run_id else None
        if pane is not None and pane.is_mounted:
            pane.sync(now)

    @property
    def active_run_id(self) -> str | None:
        active = self.query_one(TabbedContent).active
        for run_id, pane in self.panes.items():
            if pane.id == active:
                return run_id
        return None

    def active_log(self) -> LogView | None:
        run_id = self.active_run_id
        return self.panes[run_id].log_view if run_id else None
