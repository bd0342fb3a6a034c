"""Diffs as rich Text: unified or side by side, syntax-coloured, with intra-line marks.

difflib finds the changed lines, then, inside each replaced pair, the changed characters; rich's
Syntax colours both full texts once so every line keeps its real highlighting (a line inside a
multi-line string stays a string). Nothing here is Textual.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from difflib import SequenceMatcher
from itertools import zip_longest
from pathlib import PurePosixPath

from rich.syntax import Syntax
from rich.text import Text

from portside.core.safety.terminal_text import clean_line

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
# The lexer of a port's usual files, by suffix: what Syntax.guess_lexer picks for them, without
# its first call's cost (it imports lexers and compiles every lexer's filename patterns: ~0.4 s,
# paid by the first diff card, e.g. in a replay's first frame). Other files are guessed.
KNOWN_LEXERS = {".py": "python", ".pyi": "python", ".sh": "bash", ".yaml": "yaml",
                ".yml": "yaml", ".toml": "toml", ".json": "json", ".md": "markdown",
                ".cfg": "ini", ".ini": "ini", ".txt": "text", ".c": "c", ".cc": "cpp",
                ".cpp": "cpp", ".hpp": "cpp", ".cu": "cuda"}


@dataclass
class DiffStats:
    added: int
    removed: int


def _lines(text: str) -> list[str]:
    return [clean_line(line) for line in text.splitlines()]


_BUILT: set[str] = set()  # the lexers built in this process


def lexer_built(path: str) -> bool:
    """Whether colouring ``path`` is cheap now: its lexer was built in this process (a lexer's
    first build compiles its regexes: ~0.1 s for Python on a cold start). A file without a known
    lexer says True: there the guess is what costs, and putting it off gains nothing."""
    name = KNOWN_LEXERS.get(PurePosixPath(path).suffix.lower())
    return name is None or name in _BUILT


def highlight_lines(text: str, path: str) -> list[Text]:
    """One Text per line, coloured as the whole file would be."""
    lines = _lines(text)
    if len(text) > MAX_HIGHLIGHT_CHARS:
        return [Text(line) for line in lines]
    code = "\n".join(lines)
    lexer = KNOWN_LEXERS.get(PurePosixPath(path).suffix.lower()) or Syntax.guess_lexer(path, code)
    out = list(Syntax(code, lexer, theme=THEME).highlight(code).split("\n", allow_blank=True))
    _BUILT.add(lexer)
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
        self.colour = True  # False: rows without syntax colour (until the lexer is built)
        self._sm = SequenceMatcher(None, self.a, self.b, autojunk=False)
        # A copy: difflib's get_grouped_opcodes trims the matcher's own cached list in place,
        # which would cut the start and end off the whole-file view after the hunks were shown.
        self.opcodes: list[tuple[str, int, int, int, int]] = list(self._sm.get_opcodes())
        added = sum(j2 - j1 for tag, _, _, j1, j2 in self.opcodes if tag in ("insert", "replace"))
        removed = sum(i2 - i1 for tag, i1, i2, _, _ in self.opcodes if tag in ("delete", "replace"))
        self.stats = DiffStats(added, removed)

    def _hl(self) -> tuple[list[Text], list[Text]]:
        if not self.colour:
            return [Text(line) for line in self.a], [Text(line) for line in self.b]
        if self._ha is None or self._hb is None:
            self._ha = highlight_lines("\n".join(self.a), self.path)
            self._hb = highlight_lines("\n".join(self.b), self.path)
        return self._ha, self._hb

    def _groups(self, context: int | None) -> list[list[tuple[str, int, int, int, int]]]:
        """The hunks to show (one group for the whole file); none when nothing changed."""
        if not (self.stats.added or self.stats.removed):  # every opcode is 'equal'
            return []
        if context is None:
            return [self.opcodes]
        return list(self._sm.get_grouped_opcodes(context))

    # --- rows --------------------------------------------------------------------------------
    # One Text per screen row, so a Line-API view renders only the rows it shows.

    def unified(self, context: int | None = 3) -> DiffRows:
        ha, hb = self._hl()
        width = len(str(max(len(self.a), len(self.b), 1)))
        rows: list[Text] = []
        first_change: int | None = None
        stops: list[int] = []
        new_rows: dict[int, int] = {}
        groups = self._groups(context)
        if not groups:
            return DiffRows([Text("(no changes)", style=GUTTER)], [], 0)
        for group in groups:
            if context is not None:
                _, i1, _, j1, _ = group[0]
                _, _, i2, _, j2 = group[-1]
                stops.append(len(rows))
                rows.append(Text(f"@@ -{i1 + 1},{i2 - i1} +{j1 + 1},{j2 - j1} @@", style=HUNK))
            for tag, i1, i2, j1, j2 in group:
                if tag == "equal":
                    new_rows.update((j1 + k + 1, len(rows) + k) for k in range(j2 - j1))
                    rows += [_row(j1 + k + 1, " ", hb[j1 + k], "", width) for k in range(j2 - j1)]
                    continue
                if first_change is None:
                    first_change = len(rows)
                if context is None:
                    stops.append(len(rows))
                new_rows.update((ib + 1, len(rows) + (i2 - i1) + ib - j1) for ib in range(j1, j2))
                marks_a: dict[int, list[tuple[int, int]]] = {}
                marks_b: dict[int, list[tuple[int, int]]] = {}
                if tag == "replace":
                    for ia, ib in zip(range(i1, i2), range(j1, j2), strict=False):
                        marks_a[ia], marks_b[ib] = intra_line(self.a[ia], self.b[ib])
                rows += [_row(ia + 1, "-", ha[ia], DEL_LINE, width, marks_a.get(ia), DEL_MARK)
                         for ia in range(i1, i2)]
                rows += [_row(ib + 1, "+", hb[ib], ADD_LINE, width, marks_b.get(ib), ADD_MARK)
                         for ib in range(j1, j2)]
        return DiffRows(rows, [], first_change or 0, stops, new_rows)

    def side_by_side(self, context: int | None = 3) -> DiffRows:
        """Old and new in two columns with the same number of rows, so they scroll as one."""
        ha, hb = self._hl()
        width = len(str(max(len(self.a), len(self.b), 1)))
        left: list[Text] = []
        right: list[Text] = []
        first_change: int | None = None
        stops: list[int] = []
        new_rows: dict[int, int] = {}
        groups = self._groups(context)
        if not groups:
            return DiffRows([Text("(no changes)", style=GUTTER)], [Text("")], 0)

        def cell(num: int | None, line: Text | None, bg: str,
                 marks: list[tuple[int, int]] | None = None, mark_style: str = "") -> Text:
            if line is None or num is None:
                return Text(" " * (width + 1) + "╱" * 4, style=FILLER)
            out = Text(f"{num:>{width}} ", style=GUTTER)
            out.append_text(_marked(line, bg, marks, mark_style))
            return out

        for group in groups:
            if context is not None:
                _, i1, _, j1, _ = group[0]
                _, _, i2, _, j2 = group[-1]
                stops.append(len(left))
                left.append(Text(f"@@ -{i1 + 1},{i2 - i1}", style=HUNK))
                right.append(Text(f"@@ +{j1 + 1},{j2 - j1}", style=HUNK))
            for tag, i1, i2, j1, j2 in group:
                if tag == "equal":
                    for k in range(i2 - i1):
                        new_rows[j1 + k + 1] = len(left)
                        left.append(cell(i1 + k + 1, ha[i1 + k], ""))
                        right.append(cell(j1 + k + 1, hb[j1 + k], ""))
                    continue
                if first_change is None:
                    first_change = len(left)
                if context is None:
                    stops.append(len(left))
                for ia, ib in zip_longest(range(i1, i2), range(j1, j2)):
                    if ib is not None:
                        new_rows[ib + 1] = len(left)
                    ma = mb = None
                    if ia is not None and ib is not None:
                        ma, mb = intra_line(self.a[ia], self.b[ib])
                    left.append(cell(None if ia is None else ia + 1,
                                     None if ia is None else ha[ia], DEL_LINE, ma, DEL_MARK))
                    right.append(cell(None if ib is None else ib + 1,
                                      None if ib is None else hb[ib], ADD_LINE, mb, ADD_MARK))
        return DiffRows(left, right, first_change or 0, stops, new_rows)


@dataclass
class DiffRows:
    """A diff laid out for the screen: ``left`` alone (unified) or ``left`` beside ``right``."""

    left: list[Text]
    right: list[Text]
    first_change: int  # the row of the first change, where a whole-file view starts
    # Where `]` / `[` stop: each hunk's @@ row (each change's first row in a whole-file view).
    stops: list[int] = field(default_factory=list)
    new_rows: dict[int, int] = field(default_factory=dict)  # new file's line (1-based) -> row

    def row_of_line(self, line: int) -> int | None:
        """The row showing line ``line`` of the new file, or None where the view omits it."""
        return self.new_rows.get(line)

    def __len__(self) -> int:
        return len(self.left)


def _marked(line: Text, bg: str, marks: list[tuple[int, int]] | None, mark_style: str) -> Text:
    body = line.copy()
    if bg:
        body.stylize(bg)
    for start, end in marks or ():
        body.stylize(mark_style, start, end)
    return body


def _row(num: int, sign: str, line: Text, bg: str, width: int,
         marks: list[tuple[int, int]] | None = None, mark_style: str = "") -> Text:
    out = Text(f"{num:>{width}} ", style=GUTTER, no_wrap=True, end="")
    out.append(f"{sign} ", style=("bold red" if sign == "-" else "bold green" if sign == "+"
                                  else GUTTER) + (f" {bg}" if bg else ""))
    body = _marked(line, bg, marks, mark_style)
    if bg:
        body.pad_right(1)  # the change's background shows past the line's end
    out.append_text(body)
    return out


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
