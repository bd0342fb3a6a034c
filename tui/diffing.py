"""Diffs as rich Text: unified or side by side, syntax-coloured, with intra-line marks.

difflib finds the changed lines, then, inside each replaced pair, the changed characters; rich's
Syntax colours both full texts once so every line keeps its real highlighting (a line inside a
multi-line string stays a string). Nothing here is Textual.
"""

from __future__ import annotations

from dataclasses import dataclass
from difflib import SequenceMatcher
from itertools import zip_longest

from rich.syntax import Syntax
from rich.text import Text

from portside.core.textsafe import clean_line

DEL_LINE = "on #3a1c1c"
DEL_MARK = "bold on #8b2c2c"
ADD_LINE = "on #17361f"
ADD_MARK = "bold on #2e7d3f"
GUTTER = "#7f8790"
HUNK = "bold #6aa0d8"
FILLER = "#3b3f45"
THEME = "monokai"
# Above this size a file is shown without syntax colour: highlighting must stay instant.
MAX_HIGHLIGHT_CHARS = 400_000


@dataclass
class DiffStats:
    added: int
    removed: int


def _lines(text: str) -> list[str]:
    return [clean_line(line) for line in text.splitlines()]


def highlight_lines(text: str, path: str) -> list[Text]:
    """One Text per line, coloured as the whole file would be."""
    lines = _lines(text)
    if len(text) > MAX_HIGHLIGHT_CHARS:
        return [Text(line) for line in lines]
    code = "\n".join(lines)
    lexer = Syntax.guess_lexer(path, code)
    out = Syntax(code, lexer, theme=THEME).highlight(code).split("\n", allow_blank=True)
    for t in out:
        t.style = ""  # drop the theme's background: the diff sets its own
        t.end = ""
    out = out[: len(lines)]
    out += [Text(line) for line in lines[len(out):]]
    return out


class EditDiff:
    """One file's change, with its highlighting computed once."""

    def __init__(self, before: str, after: str, path: str) -> None:
        self.path = path
        self.a = _lines(before)
        self.b = _lines(after)
        self._ha: list[Text] | None = None
        self._hb: list[Text] | None = None
        self._sm = SequenceMatcher(None, self.a, self.b, autojunk=False)
        self.opcodes = self._sm.get_opcodes()
        added = sum(j2 - j1 for tag, _, _, j1, j2 in self.opcodes if tag in ("insert", "replace"))
        removed = sum(i2 - i1 for tag, i1, i2, _, _ in self.opcodes if tag in ("delete", "replace"))
        self.stats = DiffStats(added, removed)

    def _hl(self) -> tuple[list[Text], list[Text]]:
        if self._ha is None or self._hb is None:
            self._ha = highlight_lines("\n".join(self.a), self.path)
            self._hb = highlight_lines("\n".join(self.b), self.path)
        return self._ha, self._hb

    def _groups(self, context: int | None) -> list[list[tuple[str, int, int, int, int]]]:
        if context is None:
            return [self.opcodes]
        return list(self._sm.get_grouped_opcodes(context))

    def first_changed_line(self) -> int:
        for tag, _i1, _i2, j1, _j2 in self.opcodes:
            if tag != "equal":
                return j1
        return 0

    # --- unified -----------------------------------------------------------------------------

    def unified(self, context: int | None = 3) -> Text:
        ha, hb = self._hl()
        width = len(str(max(len(self.a), len(self.b), 1)))
        out = Text(no_wrap=True, overflow="crop")
        groups = self._groups(context)
        if not groups or all(tag == "equal" for g in groups for tag, *_ in g):
            out.append("(no changes)", style=GUTTER)
            return out
        for n, group in enumerate(groups):
            if context is not None:
                _, i1, _, j1, _ = group[0]
                _, _, i2, _, j2 = group[-1]
                if n:
                    out.append("\n")
                out.append(f"@@ -{i1 + 1},{i2 - i1} +{j1 + 1},{j2 - j1} @@", style=HUNK)
            for tag, i1, i2, j1, j2 in group:
                if tag == "equal":
                    for k in range(j2 - j1):
                        self._row(out, j1 + k + 1, " ", hb[j1 + k], "", width)
                    continue
                olds = list(range(i1, i2))
                news = list(range(j1, j2))
                marks_a: dict[int, list[tuple[int, int]]] = {}
                marks_b: dict[int, list[tuple[int, int]]] = {}
                if tag == "replace":
                    for ia, ib in zip(olds, news, strict=False):
                        ma, mb = intra_line(self.a[ia], self.b[ib])
                        marks_a[ia], marks_b[ib] = ma, mb
                for ia in olds:
                    self._row(out, ia + 1, "-", ha[ia], DEL_LINE, width, marks_a.get(ia), DEL_MARK)
                for ib in news:
                    self._row(out, ib + 1, "+", hb[ib], ADD_LINE, width, marks_b.get(ib), ADD_MARK)
        return out

    @staticmethod
    def _row(out: Text, num: int, sign: str, line: Text, bg: str, width: int,
             marks: list[tuple[int, int]] | None = None, mark_style: str = "") -> None:
        if len(out):
            out.append("\n")
        out.append(f"{num:>{width}} ", style=GUTTER)
        out.append(f"{sign} ", style=("bold red" if sign == "-" else "bold green" if sign == "+"
                                      else GUTTER) + (f" {bg}" if bg else ""))
        body = line.copy()
        if bg:
            body.stylize(bg)
        for start, end in marks or ():
            body.stylize(mark_style, start, end)
        if bg:
            body.pad_right(1)
        out.append_text(body)

    # --- side by side ------------------------------------------------------------------------

    def side_by_side(self, context: int | None = 3) -> tuple[Text, Text]:
        """Two texts with the same number of rows, so two panes scrolled together line up."""
        ha, hb = self._hl()
        width = len(str(max(len(self.a), len(self.b), 1)))
        left: list[Text] = []
        right: list[Text] = []

        def cell(num: int | None, line: Text | None, bg: str,
                 marks: list[tuple[int, int]] | None = None, mark_style: str = "") -> Text:
            if line is None or num is None:
                return Text(" " * (width + 1) + "╱" * 4, style=FILLER)
            out = Text(f"{num:>{width}} ", style=GUTTER)
            body = line.copy()
            if bg:
                body.stylize(bg)
            for start, end in marks or ():
                body.stylize(mark_style, start, end)
            out.append_text(body)
            return out

        for group in self._groups(context):
            if context is not None:
                _, i1, _, j1, _ = group[0]
                _, _, i2, _, j2 = group[-1]
                left.append(Text(f"@@ -{i1 + 1},{i2 - i1}", style=HUNK))
                right.append(Text(f"@@ +{j1 + 1},{j2 - j1}", style=HUNK))
            for tag, i1, i2, j1, j2 in group:
                if tag == "equal":
                    for k in range(i2 - i1):
                        left.append(cell(i1 + k + 1, ha[i1 + k], ""))
                        right.append(cell(j1 + k + 1, hb[j1 + k], ""))
                    continue
                for ia, ib in zip_longest(range(i1, i2), range(j1, j2)):
                    ma = mb = None
                    if ia is not None and ib is not None:
                        ma, mb = intra_line(self.a[ia], self.b[ib])
                    left.append(cell(None if ia is None else ia + 1,
                                     None if ia is None else ha[ia], DEL_LINE, ma, DEL_MARK))
                    right.append(cell(None if ib is None else ib + 1,
                                      None if ib is None else hb[ib], ADD_LINE, mb, ADD_MARK))
        join = Text("\n", no_wrap=True, overflow="crop")
        lt, rt = join.join(left), join.join(right)
        lt.no_wrap = rt.no_wrap = True
        return lt, rt


def intra_line(old: str, new: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Character spans that differ between two paired lines (none when they share too little:
    marking everything is noise)."""
    sm = SequenceMatcher(None, old, new, autojunk=False)
    if sm.ratio() < 0.4:
        return [], []
    ma: list[tuple[int, int]] = []
    mb: list[tuple[int, int]] = []
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal":
            continue
        if i2 > i1:
            ma.append((i1, i2))
        if j2 > j1:
            mb.append((j1, j2))
    return ma, mb
