"""An alarm's evidence for a person: `describe(kind, evidence) -> list[Line]`, the one rendering
the Checks card, the headless console and the report all show, and `number`/`percent`/`value`,
the one way they write a number.

A Line is plain text in spans, each with a hint of what it is (a key, a label, the candidate's
side, a note) that a renderer may style; `depth` indents it under the line before. The card
draws a line a row with Rich styles (tui/widgets/checks.py); the console and the report join
them on one line (`one_line`). Text comes as the evidence holds it: a renderer makes it safe for
its medium (the card and the console strip escapes, the report escapes Markdown).

Two kinds have a layout of their own: clipping-changed (each run's max_norm and clipped share,
the reason) and the settings alarms (each changed setting, candidate against reference). Every
other kind, and a stored dict whose kind's layout finds nothing it knows (an older session's),
is its fields in order, `key value` a line; keys the kind's Struct does not know (evidence an
older or newer portside wrote) follow the same way, so nothing recorded is hidden. `spark` is
the card's chart, never text.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from .evidence import (
    UNSET,
    ClipConfig,
    ClippingChanged,
    Evidence,
    SettingsChanged,
    plain,
    read,
    unknown,
)
from .settings import show

__all__ = ["Hint", "Line", "Span", "describe", "number", "one_line", "percent", "value"]

#: key: a field's name; label: what a line is about (a run, a setting); candidate: the
#: candidate's side; note: said in passing.
Hint = Literal["", "key", "label", "candidate", "note"]

SKIP = frozenset({"spark"})  # drawn by the card's chart; as numbers it says nothing
SERIES_ENDS = 3  # a long list shows its first and last this many
DICT_PAIRS = 6  # a dict shows its first this many pairs
MAX_TEXT = 120  # a text value longer than this is cut (its length said)
MAX_CHANGES = 12  # settings changes shown


@dataclass(frozen=True)
class Span:
    text: str
    hint: Hint = ""


@dataclass(frozen=True)
class Line:
    spans: tuple[Span, ...]
    depth: int = 0  # 1: under the line before (a setting's values under its name)

    @property
    def text(self) -> str:
        return "".join(s.text for s in self.spans)


# --- the one number formatter ----------------------------------------------------------------


def number(v: float | int, digits: int = 4) -> str:
    """A number to `digits` significant digits; an int whole (thousands separated from 10,000);
    NaN and ±inf as nan, inf, -inf."""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}" if abs(v) >= 10_000 else str(v)
    if not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return f"{v:.{digits}g}"


def percent(v: Any) -> str:
    """A share (0..1) as a whole percentage; ? when it is not a number."""
    if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
        return f"{v * 100:.0f}%"
    return "?"


def value(v: Any, depth: int = 0) -> str:
    """Any evidence value: numbers by `number`, yes/no, None as -, a long list by its ends, a
    dict by its first pairs (one level deep), text cut at MAX_TEXT."""
    if v is None or v is UNSET:
        return "-"
    if isinstance(v, bool | int | float):
        return number(v)
    if isinstance(v, Evidence):
        return value(plain(v), depth)
    if isinstance(v, list | tuple):
        items = list(v)
        # items as deep as their list: a list of records shows each record's pairs
        if len(items) > 2 * SERIES_ENDS + 1:
            head = [value(x, depth) for x in items[:SERIES_ENDS]]
            tail = [value(x, depth) for x in items[-SERIES_ENDS:]]
            return f"[{', '.join(head)}, … {len(items) - 2 * SERIES_ENDS} more, {', '.join(tail)}]"
        return "[" + ", ".join(value(x, depth) for x in items) + "]"
    if isinstance(v, dict):
        if depth >= 1:
            return "{…}" if v else "{}"
        pairs = [f"{k}: {value(x, depth + 1)}" for k, x in v.items() if k not in SKIP]
        more = [f"… {len(pairs) - DICT_PAIRS} more"] if len(pairs) > DICT_PAIRS else []
        return "{" + ", ".join(pairs[:DICT_PAIRS] + more) + "}"
    return _cut(str(v))


def _cut(text: str, limit: int = MAX_TEXT) -> str:
    return text if len(text) <= limit else text[:limit] + f" … [{len(text) - limit} more chars]"


# --- describe --------------------------------------------------------------------------------


def describe(kind: str, evidence: Evidence | Mapping[str, Any]) -> list[Line]:
    """The evidence of an alarm of `kind` as lines for a person: the kind's Struct (as a check
    wrote it), or a stored dict (the log's, the store's, an imported export's: read as the
    kind's Struct, its unknown keys shown after)."""
    if isinstance(evidence, Evidence):
        typed, extra = evidence, {}
    else:
        stored = dict(evidence) if isinstance(evidence, Mapping) else None
        typed, extra = read(kind, stored), unknown(kind, stored)
    lines = _layout(typed)
    if lines is None:
        lines = _pairs([(f.encode_name, getattr(typed, f.name))
                        for f in msgspec.structs.fields(typed)])
    return lines + _pairs(list(extra.items()))


def one_line(lines: list[Line], limit: int = 600) -> str:
    """The lines on one line, ``·`` between them; cut at a line's end past `limit`."""
    out: list[str] = []
    used = 0
    for n, line in enumerate(lines):
        part = line.text.strip()
        if out and used + len(part) > limit:
            out.append(f"… {len(lines) - n} more")
            break
        out.append(part)
        used += len(part) + 3
    return " · ".join(out)


def _pairs(items: list[tuple[str, Any]]) -> list[Line]:
    return [Line((Span(f"{_cut(str(k), 60)} ", "key"), Span(value(plain(v)))))
            for k, v in items if v is not UNSET and k not in SKIP]


def _layout(e: Evidence) -> list[Line] | None:
    """The lines of a kind with a layout of its own; None: its fields, in order."""
    if isinstance(e, ClippingChanged) and isinstance(e.candidate, ClipConfig):
        return _clipping(e)
    if isinstance(e, SettingsChanged) and isinstance(e.changes, list) and e.changes:
        return _settings(e)
    return None


def _clip_line(c: ClipConfig) -> str:
    norms = "?" if c.max_norm is UNSET else value(plain(c.max_norm))
    steps = "?" if c.steps is UNSET else value(c.steps)
    return f"max_norm {norms}, clips {percent(c.clipped_share)} of {steps} steps"


def _clipping(e: ClippingChanged) -> list[Line]:
    """What changed the way a reviewer reads it: each reference's max_norm and clipped share,
    then the candidate's, then why (the study's silent failure)."""
    assert isinstance(e.candidate, ClipConfig)
    refs = e.references if isinstance(e.references, list) else []
    out = [Line((Span(f"ref#{i} ", "label"), Span(_clip_line(r)))) for i, r in enumerate(refs, 1)]
    out.append(Line((Span("cand  ", "candidate"), Span(_clip_line(e.candidate)))))
    if e.reason:
        out.append(Line((Span(f"reason {value(e.reason)}", "note"),)))
    return out


def _settings(e: SettingsChanged) -> list[Line]:
    """One changed setting a pair of lines: its name (where: the optimizer, its group), then the
    candidate's value against the reference's, as a script writes them."""
    assert isinstance(e.changes, list)
    out = []
    for c in e.changes[:MAX_CHANGES]:
        where = f"{c.where} " if c.where else ""
        setting = "" if c.setting is UNSET else str(c.setting)
        out.append(Line((Span(_cut(where + setting, 60), "label"),)))
        cand = show(plain(c.candidate)) if c.candidate is not UNSET else "?"
        ref = show(plain(c.reference)) if c.reference is not UNSET else "?"
        out.append(Line((Span("cand ", "candidate"), Span(_cut(cand, 80)), Span("  ref ", "label"),
                         Span(_cut(ref, 80))), depth=1))
    if e.allowed is True:
        out.append(Line((Span("allowed by criteria settings.allow", "note"),)))
    return out
