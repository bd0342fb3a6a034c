"""The live review: Agent | Runs | Checks, a header of what the session costs, and the keys that
turn the reviewer's judgement into recorded interventions."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import OptionList, Static

from portside.core.log import events as ev
from portside.core.log.performance import performance
from portside.core.safety.terminal_text import clean_line
from portside.core.session.review import GateError, ReviewGate

from ..messages import AlarmSelected
from ..model import CommandView, SessionModel, clock
from ..widgets.agent_column import AgentColumn
from ..widgets.checks import ChecksPanel
from ..widgets.command_card import CommandCard
from ..widgets.diff_card import DiffCard
from ..widgets.footer import ReviewFooter
from ..widgets.runs import RunsPanel
from ..widgets.text_line import TextLine
from .dialogs import DialogResult, EditDialog, TextDialog, VerdictDialog
from .help import HelpScreen
from .review_keys import AGENT_ACTIONS, REVIEW_BINDINGS, VIEW_BINDINGS

# Log tails and status lines redraw at most this often: 10 frames a second keeps a flood
# readable, and each frame skipped is one a key press need not wait behind.
TICK_S = 0.1
REVIEW_HOLD_S = 4.0  # the Agent column stays wide this long after the last decision
CHART_S = 0.5  # the envelope chart is the costly redraw: at most twice a second
FAILED_PREFIX = "engine failed"  # the engine's end reason when it raised (core/session/engine.py)


class Column(Vertical):
    ALLOW_MAXIMIZE = True


class ReviewScreen(Screen[None]):
    BINDINGS = [*REVIEW_BINDINGS, *VIEW_BINDINGS]
    ALLOW_IN_MAXIMIZED_VIEW = "#top-bar, ReviewFooter"
    PALETTE = REVIEW_BINDINGS + VIEW_BINDINGS
    HELP_TITLE = "portside · keys of the live review"

    def __init__(self, model: SessionModel, gate: ReviewGate, *, mode: str = "live",
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__(id="live")
        self.model = model
        self.gate = gate
        self.mode = mode
        self.clock = clock
        self.current_edit: str | None = None
        self.edit_order: list[str] = []
        self._shown_at: dict[str, float] = {}  # item id -> when it first appeared on screen
        self._claim_item: str | None = None
        self._last_chart = 0.0
        self._alarms_dirty = False
        self._facts_dirty = False
        self._runs_ended = False  # the performance line is folded again when a run ends
        self._performance = ""
        self.failure: str = ""  # what failed, shown under the header until dismissed
        self.reviewing_layout = True  # the Agent column widens while an edit awaits a decision
        self._review_idle_since: float | None = None

    # --- layout ------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        # One docked bar: a zoomed column is laid out first, and only a docked bar stays on top.
        with Vertical(id="top-bar"):
            yield TextLine(id="header")
            agent = str(self.model.info.get("agent") or "")
            if agent.startswith("scripted"):
                yield Static(Text(f" SCRIPTED AGENT · replaying "
                                  f"{clean_line(agent.partition(':')[2])}"
                                  " · not a live model: its edits were recorded in advance ",
                                  style="bold black on #e5c07b"), id="banner")
            banner = str(self.model.info.get("banner") or "")
            if agent.startswith("scripted"):
                # the line above says it is scripted; what else the banner says (the demo's
                # "torch_xla not found: the candidate runs on the CPU") gets a line of its own
                banner = banner.partition(" · ")[2]
            if banner:
                yield Static(Text(f" {clean_line(banner)} ", style="bold black on #e5c07b"),
                             id="banner-note" if agent.startswith("scripted") else "banner")
            yield Static(id="performance")
            yield Static(id="failure")
        with Horizontal(id="columns"):
            with Column(id="agent-col", classes="column") as col:
                col.border_title = "Agent"
                yield AgentColumn(id="transcript")
            with Column(id="runs-col", classes="column") as col:
                col.border_title = "Runs"
                yield RunsPanel(id="runs")
            with Column(id="checks-col", classes="column") as col:
                col.border_title = "Checks"
                yield ChecksPanel(self.model, str(self.model.info.get("target") or ""),
                                  id="checks")
        yield ReviewFooter()

    def on_mount(self) -> None:
        self.set_interval(TICK_S, self.tick)
        self.tick()
        transcript = self.query_one(AgentColumn)
        if str(self.model.info.get("agent") or "none") == "none":
            # Verification only: say so instead of leaving the column blank.
            transcript.mount(Static(Text(
                "No agent in this session: portside is verifying the candidate command "
                "against the reference runs.\n\nR re-runs the candidate · x aborts a run · "
                "v gives the verdict", style="dim"), classes="agent-text"))
        elif self.mode == "live" and self.model.info.get("agent") == "claude-code:attached":
            from portside.core.claude_code.attach_wait import wait_text

            # Until the references ran no hooks are installed: a `claude` started now would
            # work unreviewed. The line goes when the session says "attached".
            transcript.mount(Static(Text(wait_text(), style="bold #e5c07b"),
                                    classes="agent-text", id="attach-wait"))
        transcript.focus()

    # --- events in ---------------------------------------------------------------------------

    def apply(self, events: list[ev.Event],
              model_only: Callable[[ev.Event], bool] | None = None) -> None:
        """Fold a batch into the model and make the structural changes (new tab, card, alarm)
        now; redraws of tails, status and chart wait for the next tick. ``model_only``: the
        events that feed the model alone (a replay's history before its transcript window);
        their edits keep their place in the numbering."""
        transcript = self.query_one(AgentColumn)
        runs = self.query_one(RunsPanel)
        renumber = select = False
        awaiting: DiffCard | CommandCard | None = None
        for e in events:
            self.model.apply(e)
            if model_only is not None and model_only(e):
                if isinstance(e, ev.EditProposed | ev.CommandProposed):
                    self.edit_order.append(_proposal_id(e))
                continue
            match e:
                case ev.RunStarted():
                    runs.add_run(self.model.runs[e.run_id])
                case ev.RunFinished():
                    runs.relabel()
                    self._facts_dirty = True
                    self._runs_ended = True
                case ev.RunRecord() if any(r.get("type") == "facts" for r in e.records):
                    self._facts_dirty = True
                case (ev.AlarmRaised() | ev.AlarmUpdated() | ev.AlarmAcknowledged()
                      | ev.AlarmCleared() | ev.AlarmLocalized()):
                    self._alarms_dirty = True
                case ev.EditProposed() | ev.CommandProposed():
                    item_id = _proposal_id(e)
                    card = transcript.add_event(e, self.model.proposal(item_id))
                    if card is not None:
                        self._shown_at.setdefault(item_id, time.time())
                        self.edit_order.append(item_id)
                        current = self.model.proposal(self.current_edit or "")
                        if current is None or current.decided is not None:
                            self.current_edit = item_id
                            select = True
                            if card.view.decided is None:
                                awaiting = card
                    renumber = True
                case ev.EditDecided() | ev.EditApplied():
                    renumber = True
                case ev.AgentClaimed():
                    transcript.add_event(e)
                    self._claim_item = f"claim-{e.seq}"
                    self._shown_at.setdefault(self._claim_item, time.time())
                case (ev.AgentText() | ev.AgentToolCall() | ev.AgentToolResult()
                      | ev.ProjectScanned()):
                    transcript.add_event(e)
                case ev.Intervention() | ev.SessionState():
                    transcript.add_event(e)
                    if isinstance(e, ev.SessionState) and e.state == "attached":
                        for wait in self.query("#attach-wait"):
                            wait.remove()
                case ev.SessionEnded() if e.reason.startswith(FAILED_PREFIX):
                    self.show_failure(e.reason)
        if select:  # once for the batch: each card restyled at most once (a replay's load)
            self._select_edit(self.current_edit or "", scroll=False)
        if awaiting is not None and awaiting.edit_id == self.current_edit:
            transcript.bring_into_view(awaiting)  # its title and marks in view, not below
        if renumber:
            self._renumber_cards()
        self._sync_reviewing()
        # The header answers the reviewer's own actions: redraw it now, not on the next tick.
        self._update_header()

    def _sync_reviewing(self, settle: bool = False) -> None:
        """Widen the Agent column while an edit awaits the reviewer, and keep it wide for
        REVIEW_HOLD_S after the last decision: an agent proposes edits in bursts, and each
        flip re-lays out and repaints every column at its new width (measured: most of the
        time from a permission request to its card on screen). `settle` narrows at once."""
        waiting = bool(self.model.undecided()) and not self.model.ended
        columns = self.query_one("#columns", Horizontal)
        if waiting and self.reviewing_layout:
            self._review_idle_since = None
            columns.add_class("-reviewing")
            return
        if not columns.has_class("-reviewing"):
            return
        now = time.monotonic()
        if self._review_idle_since is None:
            self._review_idle_since = now
        if (settle or self.model.ended or not self.reviewing_layout
                or now - self._review_idle_since >= REVIEW_HOLD_S):
            columns.remove_class("-reviewing")
            self._review_idle_since = None

    def show_failure(self, reason: str) -> None:
        """Keep the reason on screen until the reviewer dismisses it (a toast would go away)."""
        if self.failure == reason:
            return
        self.failure = reason
        bar = self.query_one("#failure", Static)
        bar.update(Text.assemble((" ✖ ", "bold"), clean_line(reason),
                                 ("   d dismisses ", "dim"), style="bold white on #8b1a1a"))
        bar.display = True
        self.refresh_bindings()

    def action_dismiss_failure(self) -> None:
        self.query_one("#failure", Static).display = False
        self.refresh_bindings()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "dismiss_failure":
            return self.is_mounted and self.query_one("#failure", Static).display
        # A session without an agent: nothing proposes or listens (not in the footer, not run).
        return action not in AGENT_ACTIONS or self.has_agent()

    def has_agent(self) -> bool:
        agent = str(self.model.info.get("agent") or "none")
        return agent not in ("none", "") or bool(self.model.edits or self.model.commands)

    def _update_performance(self) -> None:
        """The performance and cost sentence, once a reference and a candidate passed: the
        same fold of the log as `verify --json`'s cost.performance (core/log/performance.py)."""
        perf = performance(self.model.ledger)
        line = str(perf["line"]) if perf is not None else ""
        if line == self._performance:
            return
        self._performance = line
        bar = self.query_one("#performance", Static)
        bar.update(Text.assemble((" performance ", "dim"), clean_line(line)))
        bar.display = bool(line)

    def _update_header(self) -> None:
        self.query_one("#header", TextLine).set(self.header_text(self.clock()))

    def tick(self) -> None:
        now = self.clock()
        if self._alarms_dirty:
            self._alarms_dirty = False
            for alarm_id in self.query_one(ChecksPanel).refresh_alarms():
                self._shown_at.setdefault(alarm_id, time.time())
        if self._facts_dirty:
            self._facts_dirty = False
            self.query_one(ChecksPanel).refresh_facts()
        self.query_one(ChecksPanel).refresh_decided()  # a few runs and alarms: cheap each tick
        self.query_one(RunsPanel).sync(now)
        if self._runs_ended:
            self._runs_ended = False
            self._update_performance()
        if time.monotonic() - self._last_chart >= CHART_S:
            self._last_chart = time.monotonic()
            self.query_one(ChecksPanel).refresh_chart()
        self._update_header()
        self._tell_gate_shown()
        if self._review_idle_since is not None:
            self._sync_reviewing()

    def flush(self) -> None:
        """Redraw everything now (tests and snapshots do not wait for the tick or the hold)."""
        self._last_chart = 0.0
        self.tick()
        self._sync_reviewing(settle=True)

    def _tell_gate_shown(self) -> None:
        # The engine registers a pending item only when it starts waiting, which can be after
        # the card appeared: keep telling the gate when the reviewer first saw it.
        for item in list(self.gate.pending.values()):
            if item.shown_at is None and item.item_id in self._shown_at:
                self.gate.shown(item.item_id, at=self._shown_at[item.item_id])
        for alarm_id, alarm in self.gate.alarms.items():
            if alarm.shown_at is None and alarm_id in self._shown_at:
                self.gate.shown(alarm_id, at=self._shown_at[alarm_id])

    # --- header ------------------------------------------------------------------------------

    def status(self) -> str:
        if self.gate.paused:
            return "paused"
        if self.gate.pending_edits():
            return "awaiting review"
        if self.gate.pending_claim() is not None:
            return "awaiting verdict"
        runs = self.model.runs.values()
        if (self.model.state == "running" and not self.has_agent() and runs
                and all(r.finished is not None for r in runs)):
            return "awaiting verdict"  # every run ended: nothing runs, the verdict is next
        return self.model.state

    def header_text(self, now: float) -> Text:
        """Two lines: where the session stands, then what it has cost so far."""
        m = self.model
        project = Path(str(m.info.get("project") or "?")).name or "?"
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(" portside ", style="bold")
        t.append(f"{clean_line(project)} → {clean_line(str(m.info.get('target') or '?'))}",
                 style="bold #e5c07b")
        status = self.status()
        style = {"paused": "bold black on yellow", "awaiting review": "bold #61afef",
                 "awaiting verdict": "bold #61afef", "running": "bold green",
                 "engine failed": "bold white on red"}.get(status, "bold")
        rest = Text.assemble("  ", (self.mode_text(status), style), f" {clock(m.elapsed(now))}")
        cap = m.max_attempts()
        rest.append(f"  attempt {m.attempts()}{f'/{cap}' if cap else ''}")
        if m.session_id:
            # The id gives way first when the line is too long (a replay's position, a long
            # target): it was the mode, clock and attempt that were cut at 120 columns.
            sid = clean_line(m.session_id)
            room = (self.size.width or self.app.size.width) - t.cell_len - rest.cell_len
            label = next((x for x in (f"  session {sid}", f"  {sid}") if len(x) <= room), "")
            t.append(label, style="dim")
        t.append_text(rest)
        t.append("\n")
        t.append(" spend ", style="dim")
        t.append(f"${m.compute_usd():.2f} compute + ${m.token_usd:.2f} tokens · "
                 f"{m.human_minutes():.1f} min human")
        open_alarms = [a for a in m.open_alarms() if not a.acknowledged]
        t.append(" · ")
        t.append(plural(len(open_alarms), "open alarm"), style="bold red" if open_alarms else "")
        led = m.ledger
        t.append(f" · {plural(led.interventions, 'intervention')}")
        if led.review_notes:
            t.append(f" · {plural(led.review_notes, 'review note')}", style="dim")
        return t

    def mode_text(self, status: str) -> str:
        """The header's mode field (replay adds its speed and position here)."""
        return f" {self.mode} · {status} "

    # --- selection helpers -------------------------------------------------------------------

    def _renumber_cards(self) -> None:
        # Edits and commands are numbered apart: "edit 2/3", "command 1/4".
        cards = self.query_one(AgentColumn).cards
        for group in (self.model.edits, self.model.commands):
            ids = [i for i in self.edit_order if i in group]
            for n, edit_id in enumerate(ids, 1):
                if edit_id in cards:
                    cards[edit_id].refresh_status(n, len(ids))

    def _select_edit(self, edit_id: str, scroll: bool = True) -> None:
        cards = self.query_one(AgentColumn).cards
        for other_id, card in cards.items():
            card.selected = other_id == edit_id
        self.current_edit = edit_id
        if scroll and edit_id in cards:
            self.query_one(AgentColumn).scroll_to_card(cards[edit_id])

    def _card(self) -> DiffCard | CommandCard | None:
        if self.current_edit is None:
            return None
        return self.query_one(AgentColumn).cards.get(self.current_edit)

    def _target_edit(self) -> str | None:
        """The selected card when it awaits a decision, else the oldest edit awaiting one."""
        if self.current_edit and self.current_edit in self.gate.pending:
            return self.current_edit
        pending = self.gate.pending_edits()
        return pending[0].item_id if pending else self.current_edit

    def _edit_label(self, edit_id: str) -> str:
        view = self.model.proposal(edit_id)
        if isinstance(view, CommandView):
            return f"command $ {view.event.command} ({edit_id})"
        return f"{view.event.path} ({edit_id})" if view else edit_id

    # --- gate calls --------------------------------------------------------------------------

    def _act(self, what: str, fn: Callable[..., ev.Intervention], *args: Any,
             **kwargs: Any) -> ev.Intervention | None:
        """Call the gate; confirm only once it returned (the intervention is on disk)."""
        try:
            rec = fn(*args, **kwargs)
        except GateError as exc:
            self.notify(str(exc), title=what, severity="warning")
            return None
        except Exception as exc:  # a failing hook or store must not take the screen down
            self.notify(f"{type(exc).__name__}: {exc}", title=f"{what} failed", severity="error")
            return None
        self.notify(f"{what} · recorded", timeout=3)
        self._update_header()
        return rec

    def action_approve(self) -> None:
        edit_id = self._target_edit()
        if edit_id is None:
            self.notify("no edit is waiting for a decision", severity="warning")
            return
        self._act("approved", self.gate.approve, edit_id)

    def action_reject(self) -> None:
        edit_id = self._target_edit()
        if edit_id is None:
            self.notify("no edit is waiting for a decision", severity="warning")
            return

        def done(result: DialogResult | None) -> None:
            if result is not None:
                self._act("rejected", self.gate.reject, edit_id, result.text)

        self.app.push_screen(TextDialog(f"Reject {self._edit_label(edit_id)}",
                                        "Why? The agent is told this reason.",
                                        confirm="Reject"), done)

    def action_edit(self) -> None:
        edit_id = self._target_edit()
        view = self.model.proposal(edit_id or "")
        if edit_id is None or view is None:
            self.notify("no edit is waiting for a decision", severity="warning")
            return
        if isinstance(view, CommandView):
            path, text = f"$ {view.event.cwd}", view.event.command
        else:
            path, text = view.event.path, view.event.after

        def done(result: DialogResult | None) -> None:
            if result is not None and result.after is not None:
                self._act("edited", self.gate.edit, edit_id, result.after, result.text)

        self.app.push_screen(EditDialog(path, text), done)

    def action_message(self) -> None:
        def done(result: DialogResult | None) -> None:
            if result is not None:
                self._act("message sent", self.gate.message, result.text, started=result.opened_at)

        self.app.push_screen(TextDialog("Message the agent", "It reads this on its next turn.",
                                        confirm="Send"), done)

    def action_pause(self) -> None:
        self._act("resumed" if self.gate.paused else "paused", self.gate.toggle_pause)

    def _selected_alarm(self) -> str | None:
        return self.query_one(ChecksPanel).selected

    def action_localize(self) -> None:
        known = self.model.alarms.get(self._selected_alarm() or "")
        done = known.localized if known is not None else None
        if known is not None and done is not None and not done.error:
            # Asked again: the kept answer, not a second trace (minutes on a real project).
            self.query_one("#evidence").scroll_visible(animate=False, top=True)
            self.notify(clean_line(done.summary or "diverged", 200),
                        title=f"⌖ {known.event.check} (localized already)", timeout=10)
            return
        try:
            started = self.gate.localize(self._selected_alarm())
        except GateError as exc:
            self.notify(str(exc), title="localize", severity="warning")
            return
        self.notify(started, title="localize", timeout=8)

    def action_acknowledge(self) -> None:
        sel = self._selected_alarm()
        state = self.gate.alarms.get(sel or "")
        target = sel if state is not None and not state.acknowledged and not state.cleared else None
        self._act("alarm acknowledged", self.gate.acknowledge, target)

    def action_override(self) -> None:
        sel = self._selected_alarm()
        open_ids = {a.alarm_id for a in self.gate.open_errors()}
        target = sel if sel in open_ids else None
        if target is None:
            ranked = sorted(self.gate.open_errors(),
                            key=lambda a: (-ev.SEVERITY_RANK[a.severity], a.seq))
            if not ranked:
                self.notify("no open error alarm to override", severity="warning")
                return
            target = ranked[0].alarm_id
        alarm = self.gate.alarms[target]

        def done(result: DialogResult | None) -> None:
            if result is not None:
                self._act("alarm overridden", self.gate.override, target, result.text)

        self.app.push_screen(TextDialog(f"Override {alarm.check}: {clean_line(alarm.title)}",
                                        "Why is this alarm wrong? It will no longer block a pass.",
                                        confirm="Override"), done)

    def action_rerun(self) -> None:
        self._act("re-run requested", self.gate.rerun)

    def action_abort(self) -> None:
        run = self.model.running_run(prefer=self.query_one(RunsPanel).active_run_id)
        if run is None:
            self.notify("no run is running", severity="warning")
            return
        run_id = run.run_id

        def done(result: DialogResult | None) -> None:
            if result is not None:
                self._act(f"abort {run.label}", self.gate.abort, run_id, result.text,
                          started=result.opened_at)

        self.app.push_screen(TextDialog(f"Abort {run.label} ({run_id})?",
                                        "Kills the run's process group. Note (optional):",
                                        required=False, confirm="Abort"), done)

    def action_verdict(self) -> None:
        errors = self.gate.open_errors()
        summary = (f"{plural(len(errors), 'open error alarm')}: " + alarm_names(errors)
                   if errors else "no open error alarms") + " · enter, then Pass or Fail"

        def done(result: DialogResult | None) -> None:
            if result is not None and result.choice in ("pass", "fail"):
                self._act(f"verdict {result.choice}", self.gate.verdict, result.choice,
                          result.text)

        self.app.push_screen(VerdictDialog(summary), done)

    def action_note(self) -> None:
        def done(result: DialogResult | None) -> None:
            if result is not None:
                self._act("note saved", self.gate.note, result.text, started=result.opened_at)

        self.app.push_screen(TextDialog("Note", "Saved in the session log.", confirm="Save"), done)

    # --- view actions ------------------------------------------------------------------------

    def _columns(self) -> list[Column]:
        return list(self.query(Column))

    def _focused_column(self) -> Column | None:
        node: Any = self.focused
        while node is not None and not isinstance(node, Column):
            node = node.parent
        return node

    def action_focus_column(self) -> None:
        cols = self._columns()
        current = self._focused_column()
        nxt = cols[(cols.index(current) + 1) % len(cols)] if current in cols else cols[0]
        self._focus_in(nxt)

    def _focus_in(self, col: Column) -> None:
        target: Widget | None = None
        if col.id == "agent-col":
            target = self._card() if self._card() is not None else self.query_one(AgentColumn)
        elif col.id == "runs-col":
            target = self.query_one(RunsPanel).active_log()
        else:
            target = self.query_one("#alarms", OptionList)
        if target is None:
            focusable = [w for w in col.query("*") if w.focusable]
            target = focusable[0] if focusable else None
        if target is not None:
            target.focus()

    def action_zoom(self) -> None:
        if self.maximized is not None:
            self.minimize()
            return
        col = self._focused_column() or self._columns()[0]
        self.maximize(col, container=False)

    def action_resize(self, delta: int) -> None:
        col = self._focused_column()
        if col is None:
            return
        width = col.styles.width
        current = int(width.value) if width is not None and width.unit.name == "FRACTION" else 10
        col.styles.width = f"{max(2, min(40, current + delta))}fr"

    def action_toggle_split(self) -> None:
        card = self._card()
        if card is not None:
            card.split = not card.split

    def action_toggle_full(self) -> None:
        card = self._card()
        if card is not None:
            card.full = not card.full

    def _step_edit(self, step: int) -> None:
        if not self.edit_order:
            return
        i = self.edit_order.index(self.current_edit) if self.current_edit in self.edit_order else 0
        self._select_edit(self.edit_order[(i + step) % len(self.edit_order)])
        card = self._card()
        if card is not None:
            card.call_after_refresh(card.focus) if not card.is_mounted else card.focus()

    def action_next_edit(self) -> None:
        card = self._card()
        if not (isinstance(card, DiffCard) and card.body.step_hunk(1)):
            self._step_edit(1)

    def action_prev_edit(self) -> None:
        card = self._card()
        if not (isinstance(card, DiffCard) and card.body.step_hunk(-1)):
            self._step_edit(-1)

    def action_diff_scroll(self, rows: int) -> None:
        card = self._card()
        if isinstance(card, DiffCard):
            card.body.scroll_rows(rows)

    def action_search(self) -> None:
        runs = self.query_one(RunsPanel)
        run_id = runs.active_run_id
        if run_id is None:
            self.notify("no run log to search yet", severity="warning")
            return
        runs.search(run_id)

    def action_compare(self) -> None:
        from .compare import CompareScreen

        checks = self.query_one(ChecksPanel)
        self.app.push_screen(CompareScreen(self.model, checks.alarm_order, checks.selected))

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen(self.PALETTE + list(self.app.BINDINGS),  # type: ignore[arg-type]
                                        title=self.HELP_TITLE))

    def on_alarm_selected(self, message: AlarmSelected) -> None:
        self._shown_at.setdefault(message.alarm_id, time.time())

    def on_descendant_focus(self, event: Any) -> None:
        # Focusing a card (click, tab) selects it for a / r / e.
        node: Any = event.widget if hasattr(event, "widget") else None
        while node is not None and not isinstance(node, DiffCard | CommandCard):
            node = node.parent
        if isinstance(node, DiffCard | CommandCard) and node.edit_id != self.current_edit:
            self._select_edit(node.edit_id, scroll=False)


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def alarm_names(alarms: list[Any], shown: int = 4) -> str:
    """Every alarm's check, or the first few and how many more: the count and the names agree
    (the dialog said "5 open error alarm(s)" and named four)."""
    names = ", ".join(a.check for a in alarms[:shown])
    return names + (f" and {len(alarms) - shown} more" if len(alarms) > shown else "")


def _proposal_id(e: ev.Event) -> str:
    """The id a/r/e answer for an edit or a command proposal."""
    cmd = ev.as_command(e)
    return cmd.command_id if cmd is not None else e.edit_id  # type: ignore[attr-defined]
