"""The Checks column: alarms by severity with their evidence, the envelope chart, hardware facts,
and compile time apart from steady state."""

from __future__ import annotations

import math
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from portside.core.checks.describe import Hint, Line, describe, value
from portside.core.checks.evidence import (
    UNSET,
    LrScheduleChanged,
    NumericDrift,
    Spark,
    likely_causes,
)
from portside.core.checks.wanted_hardware import is_wanted_hardware
from portside.core.log.decided import Decided, decided
from portside.core.safety.terminal_text import clean_line
from portside.core.workspace.risk import linked_edits_for

from ..chart import envelope_chart, envelope_from_runs
from ..messages import AlarmSelected
from ..model import AlarmView, SessionModel
from .text_line import TextLine

SEVERITY_MARK = {"critical": ("✖✖", "bold white on red"), "error": ("✖", "bold red"),
                 "warning": ("⚠", "bold yellow"), "info": ("ℹ", "cyan")}
MAX_CHART_POINTS = 2_000


def alarm_prompt(a: AlarmView, width: int = 40) -> Text:
    """One line per alarm (the full title is in the evidence below)."""
    mark, style = SEVERITY_MARK.get(a.event.severity, ("•", ""))
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append(f"{mark} ", style=style)
    t.append(a.event.check, style="bold" if not (a.acknowledged or a.cleared) else "dim")
    if a.cleared:
        t.append(" cleared", style="dim")
    elif a.acknowledged:
        t.append(" ack", style="dim green")
    room = width - t.cell_len - 2
    if room > 4:
        title = clean_line(a.title)
        t.append(f"  {title if len(title) <= room else title[: room - 1] + '…'}", style="dim")
    return t


def decided_text(fact: Decided) -> Text:
    """The Checks column's first line: is the verdict already decided, and by what."""
    mark, style = {"fail": ("✖", "bold red"), "pass": ("✓", "bold green")}.get(
        fact.verdict, ("…", "dim"))
    t = Text()
    t.append(f"{mark} ", style=style)
    head, _, rest = fact.short().partition(": ")
    t.append(head, style=style)
    t.append(f": {clean_line(rest)}", style="" if fact.verdict else "dim")
    return t


#: How the card styles describe()'s hints.
HINT_STYLE: dict[Hint, str] = {"": "", "key": "dim", "label": "bold", "candidate": "bold red",
                               "note": "dim"}


def lines_text(lines: list[Line]) -> Text:
    """describe()'s lines, one a row under the alarm's title, indented by their depth."""
    t = Text()
    for line in lines:
        last = len(line.spans) - 1
        for i, span in enumerate(line.spans):
            text = clean_line(span.text)
            if i == 0:
                text = "  " * (line.depth + 1) + text
            t.append(text + ("\n" if i == last else ""), style=HINT_STYLE[span.hint])
    return t


def evidence_text(a: AlarmView, under_title: Text | None = None) -> Text:
    e = a.event
    t = Text()
    mark, style = SEVERITY_MARK.get(e.severity, ("•", ""))
    t.append(f"{mark} {e.check}", style=style)
    t.append(f" ({e.severity})\n", style="dim")
    t.append(clean_line(a.title) + "\n")
    if under_title is not None:
        t.append_text(under_title)
    if a.evidence_step is not None:
        t.append(f"  evidence as of step {a.evidence_step}\n", style="dim")
    why = a.entry.cleared_reason if a.cleared and a.entry is not None else ""
    if why:  # an override's, or the rerun that superseded the run it was about
        t.append(f"  cleared: {clean_line(why)}\n", style="dim")
    return t.append_text(lines_text(describe(e.check, a.evidence)))


def localized_text(a: AlarmView) -> Text:
    """Where the candidate first diverged from the reference (the `L` key, verify --localize)."""
    t = Text()
    done = a.localized
    if done is None:
        return t
    if done.error:
        t.append(f"  ⌖ could not localize: {clean_line(done.error, 200)}\n", style="yellow")
        return t
    div = done.divergence or {}
    t.append("  ⌖ ", style="bold #61afef")
    t.append(clean_line(done.summary or str(div.get("kind", "?")), 200) + "\n", style="bold")
    for side in ("reference", "candidate"):
        stats = div.get(side)
        if isinstance(stats, dict):
            t.append(f"    {side[:4]} ", style="dim")
            t.append(clean_line(value({k: v for k, v in stats.items() if k in STAT_KEYS}))
                     + "\n")
    return t


STAT_KEYS = ("shape", "dtype", "norm", "mean", "absmax", "abs_max")


def linked_text(model: SessionModel, a: AlarmView) -> Text:
    """The applied edit whose risk mark matches the alarm: where the reviewer should look."""
    applied = {edit_id for edit_id, v in model.edits.items() if v.applied}
    links = linked_edits_for(a.event.check, likely_causes(a.typed),
                             [v.event for v in model.edits.values()], applied)
    t = Text()
    for e, mark in links[:1]:
        t.append("  ← edit ", style="bold #e5c07b")
        t.append(f"{clean_line(e.path)} ({clean_line(e.edit_id)})", style="bold #e5c07b")
        t.append(f" carried: {clean_line(mark.text)}\n", style="#e5c07b")
    return t


class ChecksPanel(Vertical):
    def __init__(self, model: SessionModel, target: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.model = model
        self.target = target
        self.selected: str | None = None
        self._wanted: str | None = None
        self._alarm_order: list[str] = []
        self._chart_key: tuple[Any, ...] = ()
        self._decided: Decided | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="decided")
        yield OptionList(id="alarms")
        with VerticalScroll(id="evidence-scroll"):
            yield Static(Text("no alarms", style="dim"), id="evidence")
        yield TextLine(id="chart")
        yield Static(id="hardware")
        yield Static(id="compile")

    @property
    def alarm_order(self) -> list[str]:
        return list(self._alarm_order)

    # --- alarms ------------------------------------------------------------------------------

    def refresh_alarms(self) -> list[str]:
        """Rebuild the list (keeps the selection); returns the alarm ids now listed."""
        olist = self.query_one(OptionList)
        alarms = self.model.sorted_alarms()
        order = [a.event.alarm_id for a in alarms]
        olist.clear_options()
        width = max(20, olist.size.width - 2 if olist.size.width else self.size.width - 2)
        olist.add_options([Option(alarm_prompt(a, width), id=a.event.alarm_id) for a in alarms])
        self._alarm_order = order
        if order:
            wanted, self._wanted = self._wanted, None
            keep = next((a for a in (wanted, self.selected) if a is not None and a in order),
                        order[0])
            olist.highlighted = order.index(keep)
            self._show_evidence(keep)
        return order

    def select(self, alarm_id: str) -> None:
        if alarm_id in self._alarm_order:
            self.query_one(OptionList).highlighted = self._alarm_order.index(alarm_id)
            self._show_evidence(alarm_id)
        elif alarm_id in self.model.alarms:
            # Known to the model but listed only at the next tick: that rebuild selects it
            # (and posts AlarmSelected then, when the reviewer can see it).
            self._wanted = alarm_id

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        # The message comes after the fact: a rebuild's or a select()'s highlight made since
        # then wins (else a stale one takes the selection back).
        if event.option.id and event.option_index == event.option_list.highlighted:
            self._show_evidence(event.option.id)

    def _show_evidence(self, alarm_id: str) -> None:
        changed = alarm_id != self.selected
        self.selected = alarm_id
        alarm = self.model.alarms.get(alarm_id)
        if alarm is not None:
            # Where it diverged (L) under the title, above the evidence: appended below it,
            # the answer was past the column's fold at 120x40.
            text = evidence_text(alarm, localized_text(alarm))
            text.append_text(linked_text(self.model, alarm))
            self.query_one("#evidence", Static).update(text)
        if changed:
            self._chart_key = ()
            self.refresh_chart()
            self.post_message(AlarmSelected(alarm_id))

    def refresh_decided(self) -> None:
        """The log's fold (core/log/decided.py), as verify --json and replay read it."""
        fact = decided(self.model.ledger)
        if fact != self._decided:
            self._decided = fact
            self.query_one("#decided", Static).update(decided_text(fact))

    # --- chart, hardware, compile -----------------------------------------------------------

    def refresh_chart(self) -> None:
        width = max(10, self.size.width - 8) if self.size.width else 30
        alarm = self.model.alarms.get(self.selected or "")
        typed = alarm.typed if alarm else None
        spark = typed.spark if isinstance(typed, NumericDrift | LrScheduleChanged) else None
        chart: Text | None
        if alarm is not None and isinstance(spark, Spark) and spark.candidate:
            key: tuple[Any, ...] = ("alarm", self.selected, width, alarm.evidence_step)
            if key == self._chart_key:
                return
            self._chart_key = key
            cand = _floats(spark.candidate)
            if spark.lo is not UNSET:
                lo, hi = _floats(spark.lo), _floats(spark.hi)
            else:
                lo = hi = _floats(spark.reference)
            label = typed.series if isinstance(typed, NumericDrift) else ""
            chart = envelope_chart(cand, lo, hi, width, str(label or "") or "series")
        else:
            chart = self._loss_chart(width)
            if chart is None:
                return
        self.query_one("#chart", TextLine).set(chart)

    def _loss_chart(self, width: int) -> Text | None:
        """Without an alarm's own series: the newest candidate's loss vs the references'."""
        runs = list(self.model.runs.values())
        refs = [r for r in runs if r.role == "reference" and len(r.losses)]
        cands = [r for r in runs if r.role == "candidate" and len(r.losses)]
        key = ("loss", width, tuple((r.run_id, len(r.losses)) for r in refs + cands[-1:]))
        if key == self._chart_key:
            return None
        self._chart_key = key
        if not refs and not cands:
            return Text("loss: no step records yet", style="dim")
        n = max(len(r.losses) for r in refs + cands[-1:])
        stride = max(1, n // MAX_CHART_POINTS)
        steps, lo, hi = envelope_from_runs([(r.step_ids[::stride], r.losses[::stride])
                                            for r in refs])
        if cands:
            c = cands[-1]
            by_step = dict(zip(c.step_ids[::stride], c.losses[::stride], strict=False))
            if steps:
                cand = [by_step.get(s, math.nan) for s in steps]
            else:
                cand, lo, hi = list(c.losses[::stride]), [], []
        else:
            cand = []
        return envelope_chart(cand, lo, hi, width, "loss")

    def refresh_facts(self) -> None:
        self.query_one("#hardware", Static).update(self._hardware())
        self.query_one("#compile", Static).update(self._compile())

    def _hardware(self) -> Text:
        t = Text()
        t.append("hardware", style="bold")
        shown = False
        for run in self.model.runs.values():
            f = run.facts or (run.finished.device if run.finished else None)
            if not f:
                continue
            shown = True
            kind = str(f.get("device_kind") or "?")
            name = clean_line(str(f.get("device_name") or kind), 40)
            # The wrong-hardware check's own rule, so the panel and the alarm never disagree.
            ok = run.role == "reference" or is_wanted_hardware(self.target, f)
            t.append(f"\n {run.label:<7}", style="bold")
            t.append(f" {name} ×{f.get('device_count', '?')} {f.get('backend', '')}")
            if run.role == "candidate":
                t.append(" ✓" if ok else " ✖", style="green" if ok else "bold red")
                if not ok:
                    t.append(f" want {self.target}", style="red")
        if not shown:
            t.append(" no facts yet", style="dim")
        return t

    def _compile(self) -> Text:
        t = Text()
        t.append("compile vs steady", style="bold")
        shown = False
        for run in self.model.runs.values():
            f = run.finished
            if f is None:
                continue
            shown = True
            steady = f"{f.steady_step_s * 1e3:.3g} ms/step" if f.steady_step_s else "-"
            t.append(f"\n {run.label:<7} compile {f.compile_s:.3g} s · steady {steady}")
        if not shown:
            t.append(" after the first run finishes", style="dim")
        return t


def _floats(values: Any) -> list[float]:
    """A spark's series (UNSET: none)."""
    return [float(v) for v in values] if isinstance(values, list) else []
