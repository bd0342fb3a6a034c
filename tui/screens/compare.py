"""`c`: a reference and a candidate side by side, aligned by training progress.

On top, one row per step record of either run, paired the way the checks compare them
(core/checks/side_by_side.py: by epoch progress when the steps per epoch differ, else by step), the numbers
beyond the drift tolerance marked. Below, each run's own log (the LineStore, drawn line by line)
at the line it had printed when the selected step's record arrived. The selected alarm's step
(`a`) moves the table and both logs there. Which runs: the newest candidate against the first
valid reference; `C` / `r` cycle them (`C` through the larger-input runs too).
"""

from __future__ import annotations

import time
from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Footer, Static

from portside.core.checks.records.records import RunRecords
from portside.core.checks.side_by_side import alarm_step, differing, pair, row_of_step, tolerances
from portside.core.safety.terminal_text import clean_line

from ..model import RunView, SessionModel
from ..widgets.log_view import LogView
from ..widgets.step_rows import StepRows, header_text
from ..widgets.text_line import TextLine

REFRESH_S = 0.5  # a live run's new steps join the table at most this often
# ... and a refresh that took t waits 10 t more: a million live steps never hog the UI loop.
BACKOFF = 10.0


def _b(key: str, action: str, description: str, tooltip: str, show: bool = True,
       key_display: str | None = None) -> Binding:
    return Binding(key, action, description, show=show, id=f"compare.{action.split('(')[0]}",
                   tooltip=tooltip, key_display=key_display)


COMPARE_BINDINGS = [
    _b("escape,c", "close", "Back", "Back to the review screen"),
    _b("a", "alarm_step", "Alarm step",
       "Move the table and both logs to the selected alarm's step"),
    _b("right_square_bracket", "alarm(1)", "Next alarm",
       "Select the next alarm that names a step, and go there", key_display="]"),
    _b("left_square_bracket", "alarm(-1)", "Prev alarm", "Select the previous such alarm",
       key_display="["),
    _b("n", "diff(True)", "Next diff", "The next row whose numbers differ beyond the tolerance"),
    _b("N", "diff(False)", "Prev diff", "The previous row whose numbers differ", show=False),
    _b("C", "cycle('candidate')", "Candidate",
       "Compare another candidate run (cycles; the larger-input runs too)"),
    _b("r", "cycle('reference')", "Reference", "Compare against another reference run (cycles)"),
    _b("tab", "focus_next_pane", "Next pane", "Move focus: table → reference log → candidate log",
       show=False),
]


class CompareScreen(Screen[None]):
    BINDINGS = [*COMPARE_BINDINGS]
    PALETTE = COMPARE_BINDINGS
    HELP_TITLE = "portside · keys of the compare view"

    def __init__(self, model: SessionModel, alarms: list[str], selected: str | None) -> None:
        super().__init__(id="compare")
        self.model = model
        self.alarm_ids = alarms  # the Checks column's order
        self.alarm_id = selected
        self.cand_id: str | None = None
        self.ref_id: str | None = None
        self._key: tuple[Any, ...] = ()
        self.cand_rec: RunRecords | None = None
        self.ref_rec: RunRecords | None = None
        self._not_before = 0.0
        self.chosen: set[str] = set()  # roles the reviewer picked with C / r
        self._pick_default()

    def compose(self) -> ComposeResult:
        yield TextLine(id="compare-header")
        yield TextLine(id="compare-alarm")
        with Vertical(id="compare-table", classes="column"):
            yield TextLine(id="compare-columns")
            yield StepRows(id="step-rows")
        with Horizontal(id="compare-logs"):
            with Vertical(classes="column", id="compare-ref-col"):
                yield TextLine(id="ref-title")
                yield Static(id="ref-log-box")
            with Vertical(classes="column", id="compare-cand-col"):
                yield TextLine(id="cand-title")
                yield Static(id="cand-log-box")
        yield Footer()

    async def on_mount(self) -> None:
        self.query_one("#compare-columns", TextLine).set(header_text())
        await self._mount_logs()
        self.refresh_rows(force=True)
        self.set_interval(REFRESH_S, self.refresh_rows)
        rows = self.query_one(StepRows)
        rows.focus()
        if self.alarm_id is not None and self._alarm_step() is not None:
            self.call_after_refresh(self.action_alarm_step)
        else:
            self.call_after_refresh(rows.go, 0)

    # --- which runs --------------------------------------------------------------------------

    def runs(self, side: str) -> list[RunView]:
        """The runs one side cycles through: a larger-input run is the candidate's."""
        roles = ("reference",) if side == "reference" else ("candidate", "larger")
        return [r for r in self.model.runs.values() if r.role in roles]

    def _pick_default(self) -> bool:
        """The newest candidate, the first valid reference (where not chosen by hand); True
        when that changed the pair."""
        before = (self.ref_id, self.cand_id)
        cands = [r for r in self.runs("candidate") if r.role == "candidate"]
        if "candidate" not in self.chosen:
            self.cand_id = cands[-1].run_id if cands else None
        if "reference" not in self.chosen:
            valid = {r.run_id for r in self.model.ledger.valid_references()}
            refs = self.runs("reference")
            pick = [r for r in refs if r.run_id in valid] or refs
            self.ref_id = pick[0].run_id if pick else None
        return (self.ref_id, self.cand_id) != before

    async def action_cycle(self, role: str) -> None:
        runs = self.runs(role)
        if len(runs) < 2:
            self.notify(f"only {len(runs)} {role} run(s)", title="compare", timeout=3)
            return
        ids = [r.run_id for r in runs]
        current = self.cand_id if role == "candidate" else self.ref_id
        nxt = ids[(ids.index(current) + 1) % len(ids)] if current in ids else ids[0]
        self.chosen.add(role)
        if role == "candidate":
            self.cand_id = nxt
        else:
            self.ref_id = nxt
        await self._mount_logs()
        self.refresh_rows(force=True)
        self._follow_cursor()

    async def _remount(self) -> None:
        await self._mount_logs()
        self.refresh_rows(force=True)
        self._follow_cursor()

    async def _mount_logs(self) -> None:
        for side, run_id in (("ref", self.ref_id), ("cand", self.cand_id)):
            col = self.query_one(f"#compare-{side}-col", Vertical)
            for old in col.query(LogView):
                await old.remove()
            for box in col.query(f"#{side}-log-box"):
                await box.remove()
            run = self.model.runs.get(run_id or "")
            title = self.query_one(f"#{side}-title", TextLine)
            if run is None:
                title.set(Text(f" no {'reference' if side == 'ref' else 'candidate'} run yet",
                               style="dim"))
                await col.mount(Static(id=f"{side}-log-box"))
                continue
            title.set(self._title(run))
            view = LogView(run.lines, id=f"{side}-log")
            await col.mount(view)
            view.sync()

    def _title(self, run: RunView) -> Text:
        runs = self.runs("reference" if run.role == "reference" else "candidate")
        pos = [r.run_id for r in runs].index(run.run_id) + 1
        key = "r" if run.role == "reference" else "C"
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(f" {run.label} {run.mark} ", style="bold")
        t.append(f"{run.finished.outcome if run.finished else 'running'} · {pos}/{len(runs)}"
                 f"{f' ({key} cycles)' if len(runs) > 1 else ''} · {len(run.lines):,} lines",
                 style="dim")
        return t

    def log_view(self, side: str) -> LogView | None:
        found = self.query(f"#{side}-log")
        return found.first(LogView) if found else None

    # --- the rows ----------------------------------------------------------------------------

    def refresh_rows(self, force: bool = False) -> None:
        if self._pick_default():
            # A live session: a newer candidate started, a reference passed. Until `C` / `r`
            # chose by hand, the view follows the default pair.
            self.call_later(self._remount)
            return
        ref = self.model.runs.get(self.ref_id or "")
        cand = self.model.runs.get(self.cand_id or "")
        for side, run in (("ref", ref), ("cand", cand)):
            if run is not None and self.log_view(side) is not None:
                self.query_one(f"#{side}-title", TextLine).set(self._title(run))
        key = (self.ref_id, self.cand_id, ref.table.version if ref else -1,
               cand.table.version if cand else -1)
        if not force and (key == self._key or time.monotonic() < self._not_before):
            return
        self._key = key
        t0 = time.monotonic()
        try:
            self._rebuild(ref, cand)
        finally:
            spent = time.monotonic() - t0
            self._not_before = time.monotonic() + BACKOFF * spent

    def _rebuild(self, ref: RunView | None, cand: RunView | None) -> None:
        for side in ("ref", "cand"):
            view = self.log_view(side)
            if view is not None and view.current is None:
                view.sync()
        rows = self.query_one(StepRows)
        if ref is None or cand is None:
            self.ref_rec = self.cand_rec = None
            self._header("no pair to compare yet: needs a reference and a candidate run")
            return
        self.ref_rec = ref.table.records(ref.label)
        self.cand_rec = cand.table.records(cand.label)
        p = pair(self.cand_rec, self.ref_rec)
        diff = differing(self.cand_rec, self.ref_rec, p, tolerances(self.model.info.get("criteria")))
        rows.set_rows(self.ref_rec, self.cand_rec, p, diff)
        n_diff = int(rows.any_diff.sum())
        by = "training progress (epoch + share of the epoch)" if p.mode == "progress" \
            else "step"
        self._header(f"{ref.label} vs {cand.label} · {len(p):,} rows aligned by {by} · "
                     f"{n_diff:,} rows differ beyond the tolerance")
        self._alarm_line()

    def _header(self, what: str) -> None:
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(" portside compare ", style="bold")
        t.append(clean_line(what))
        self.query_one("#compare-header", TextLine).set(t)

    def _alarm_line(self) -> None:
        t = Text(no_wrap=True, overflow="ellipsis")
        alarm = self.model.alarms.get(self.alarm_id or "")
        if alarm is None:
            t.append(" no alarm selected (] picks one)", style="dim")
        else:
            step = alarm_step(alarm.typed)
            t.append(f" alarm {alarm.event.check}", style="bold red")
            t.append(f" · {clean_line(alarm.title)}")
            t.append(f" · a: go to step {step}" if step is not None else " · names no step",
                     style="dim")
        self.query_one("#compare-alarm", TextLine).set(t)

    @on(StepRows.Moved)
    def _moved(self, message: StepRows.Moved) -> None:
        self._follow_cursor()

    def _follow_cursor(self) -> None:
        """Both logs to the line each run had printed when the selected row's step arrived."""
        rows = self.query_one(StepRows)
        if not len(rows.pairing):
            return
        row = rows.cursor
        for side, idx in (("ref", rows.pairing.ref[row]), ("cand", rows.pairing.cand[row])):
            run = self.model.runs.get((self.ref_id if side == "ref" else self.cand_id) or "")
            view = self.log_view(side)
            if run is None or view is None or idx < 0 or idx >= len(run.table):
                continue
            view.show_line(max(0, run.table.line_of(int(idx)) - 1))

    # --- actions -----------------------------------------------------------------------------

    def _alarm_step(self) -> int | None:
        alarm = self.model.alarms.get(self.alarm_id or "")
        return alarm_step(alarm.typed) if alarm else None

    def action_alarm_step(self) -> None:
        step = self._alarm_step()
        if step is None or self.cand_rec is None:
            self.notify("the selected alarm names no step (] picks another)", title="compare",
                        severity="warning", timeout=4)
            return
        rows = self.query_one(StepRows)
        row = row_of_step(rows.pairing, self.cand_rec, step)
        if row is not None:
            rows.go(row)

    def action_alarm(self, delta: int) -> None:
        with_step = [a for a in self.alarm_ids if a in self.model.alarms
                     and alarm_step(self.model.alarms[a].typed) is not None]
        if not with_step:
            self.notify("no alarm names a step", title="compare", timeout=3)
            return
        i = with_step.index(self.alarm_id) + delta if self.alarm_id in with_step else 0
        self.alarm_id = with_step[i % len(with_step)]
        self._alarm_line()
        self.action_alarm_step()

    def action_diff(self, forward: bool) -> None:
        if self.query_one(StepRows).next_diff(forward) is None:
            self.notify(f"no {'later' if forward else 'earlier'} row differs", title="compare",
                        timeout=3)

    def action_focus_next_pane(self) -> None:
        order = [w for w in (self.query_one(StepRows), self.log_view("ref"), self.log_view("cand"))
                 if w is not None]
        current = order.index(self.focused) if self.focused in order else -1
        order[(current + 1) % len(order)].focus()

    def action_close(self) -> None:
        self.app.pop_screen()

    def action_help(self) -> None:
        from .help import HelpScreen

        self.app.push_screen(HelpScreen(self.PALETTE + list(self.app.BINDINGS),  # type: ignore[arg-type]
                                        title=self.HELP_TITLE))
