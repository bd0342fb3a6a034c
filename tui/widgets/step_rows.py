"""The compare view's table: a reference's and a candidate's step records on one row each,
paired by training progress (core/checks/side_by_side.py), the numbers that differ marked.

Line API: a row is formatted only when it scrolls into view, so a million steps cost the two
runs' columns and the pairing's index arrays, never a widget or a string per step.
"""

from __future__ import annotations

import math

import numpy as np
from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from portside.core.checks.records.records import RunRecords
from portside.core.checks.side_by_side import COMPARED, Pairing

from .lines import Frame, frame, set_virtual_size, text_strip

DIFF_STYLE = "bold #ffffff on #8b1a1a"  # a number beyond the tolerance, on both sides
CURSOR_STYLE = Style(bgcolor="#2c4f7c")
SEP = " │ "
WIDTHS = {"step": 7, "epoch": 7, "loss": 10, "grad_norm": 9, "lr": 8, "max_norm": 8}
HEAD = {"step": "step", "epoch": "epoch", "loss": "loss", "grad_norm": "grad norm",
        "lr": "lr", "max_norm": "max_norm"}
SIDE_W = sum(WIDTHS.values()) + len(WIDTHS) - 1  # cells one space apart: 2 × 55 + 5 fit 120


def _fmt(v: float, name: str) -> str:
    if math.isnan(v):
        return "·"
    if name == "step":
        return str(int(v))
    if name == "epoch":
        return f"{v:.3f}"
    if name == "lr":
        return f"{v:.3g}" if v == 0 or 1e-3 <= abs(v) < 1e4 else f"{v:.2e}"
    return f"{v:.5g}"


def header_text() -> Text:
    side = " ".join(HEAD[k].rjust(w) for k, w in WIDTHS.items())
    return Text(f"  {side}{SEP}{side}", style="bold", no_wrap=True)


class StepRows(ScrollView, can_focus=True):
    """Rows of a Pairing; `cursor` is the selected row (moves both logs under the table)."""

    DEFAULT_CSS = """
    StepRows { height: 1fr; }
    """
    BINDINGS = [
        Binding("up,k", "move(-1)", "Up", show=False),
        Binding("down,j", "move(1)", "Down", show=False),
        Binding("pageup", "move(-20)", "Page up", show=False),
        Binding("pagedown", "move(20)", "Page down", show=False),
        Binding("home", "edge(False)", "First", show=False),
        Binding("end", "edge(True)", "Last", show=False),
    ]
    cursor: reactive[int] = reactive(0, always_update=True, layout=False)

    class Moved(Message):
        def __init__(self, row: int) -> None:
            super().__init__()
            self.row = row

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.ref: RunRecords | None = None
        self.cand: RunRecords | None = None
        self.pairing = Pairing("step", np.zeros(0, np.int64), np.zeros(0, np.int64))
        self.diff: dict[str, np.ndarray] = {}
        self.any_diff = np.zeros(0, bool)
        self._frame: Frame = (Style(), 0, 0, 0)

    def set_rows(self, ref: RunRecords, cand: RunRecords, pairing: Pairing,
                 diff: dict[str, np.ndarray]) -> None:
        self.ref, self.cand, self.pairing, self.diff = ref, cand, pairing, diff
        self.any_diff = np.zeros(len(pairing), bool)
        for mask in diff.values():
            self.any_diff |= mask
        set_virtual_size(self, Size(2 * SIDE_W + len(SEP) + 2, len(pairing)))
        self.cursor = min(self.cursor, max(0, len(pairing) - 1))
        self.refresh()

    # --- moving ------------------------------------------------------------------------------

    def go(self, row: int) -> None:
        """Select ``row`` and bring it into view (a third from the top)."""
        if not len(self.pairing):
            return
        self.cursor = max(0, min(row, len(self.pairing) - 1))
        height = self.scrollable_content_region.height or 10
        if not self.scroll_y <= self.cursor < self.scroll_y + height:
            self.scroll_to(y=max(0, self.cursor - height // 3), animate=False)
        self.refresh()
        self.post_message(self.Moved(self.cursor))

    def action_move(self, delta: int) -> None:
        self.go(self.cursor + delta)

    def action_edge(self, end: bool) -> None:
        self.go(len(self.pairing) - 1 if end else 0)

    def next_diff(self, forward: bool = True) -> int | None:
        rows = np.flatnonzero(self.any_diff)
        if forward:
            after = rows[rows > self.cursor]
        else:
            after = rows[rows < self.cursor][::-1]
        if not after.size:
            return None
        self.go(int(after[0]))
        return int(after[0])

    # --- rendering ---------------------------------------------------------------------------

    def render_lines(self, crop: Region) -> list[Strip]:
        self._frame = frame(self)
        return super().render_lines(crop)

    def render_line(self, y: int) -> Strip:
        style, width, sx, sy = self._frame
        row = sy + y
        if row >= len(self.pairing) or self.ref is None or self.cand is None:
            return Strip.blank(width, style)
        text = self.row_text(row)
        if row == self.cursor:
            text.stylize_before(CURSOR_STYLE)  # under the marks: they stay visible
        return text_strip(text, self.app.console).apply_style(style).crop_extend(
            sx, sx + width, style)

    def row_text(self, row: int) -> Text:
        """The row as Text: a difference mark, the reference's cells, the candidate's."""
        assert self.ref is not None and self.cand is not None
        t = Text(no_wrap=True, end="")
        t.append("≠ " if self.any_diff[row] else "  ", style="bold red")
        self._side(t, self.ref, int(self.pairing.ref[row]), row)
        t.append(SEP, style="dim")
        self._side(t, self.cand, int(self.pairing.cand[row]), row)
        return t

    def _side(self, t: Text, r: RunRecords, i: int, row: int) -> None:
        if i < 0:
            t.append("—".center(SIDE_W), style="dim")
            return
        for k, w in WIDTHS.items():
            if k == "step":
                v = float(r.steps[i])
            elif k == "epoch":
                v = _progress(r, i)
            else:
                v = float(r.series(k)[i])
            cell = _fmt(v, k).rjust(w)
            mask = self.diff.get(k) if k in COMPARED else None
            marked = mask is not None and bool(mask[row])
            if k != "step":
                t.append(" ")
            t.append(cell, style=DIFF_STYLE if marked else ("dim" if k == "epoch" else ""))

    def cell_marked(self, row: int, name: str) -> bool:
        """Tests: whether ``name`` is marked as differing on ``row``."""
        mask = self.diff.get(name)
        return bool(mask[row]) if mask is not None else False


def _progress(r: RunRecords, i: int) -> float:
    ep, b, nb = r.col("epoch")[i], r.col("batch")[i], r.col("epoch_batches")[i]
    if math.isnan(ep):
        return math.nan
    return float(ep + (b / nb if nb and not math.isnan(b) and not math.isnan(nb) else 0.0))
