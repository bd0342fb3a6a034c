"""A candidate series against the reference envelope, as a few lines of block characters.

One shared scale for both rows (two independently scaled sparklines would hide a drift), and
the candidate's cells outside the envelope in red. Bounded work: the series are resampled to the
chart's width first.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rich.text import Text

BLOCKS = "▁▂▃▄▅▆▇█"


def resample(values: Sequence[float], width: int) -> list[float]:
    """``width`` points: the mean of each bucket (NaN buckets stay NaN)."""
    n = len(values)
    if n == 0 or width <= 0:
        return []
    if n <= width:
        return [float(v) for v in values]
    out = []
    for i in range(width):
        lo, hi = i * n // width, max((i + 1) * n // width, i * n // width + 1)
        bucket = [v for v in values[lo:hi] if isinstance(v, int | float) and math.isfinite(v)]
        out.append(sum(bucket) / len(bucket) if bucket else math.nan)
    return out


def _block(v: float, lo: float, hi: float) -> str:
    if not math.isfinite(v):
        return "·"
    if hi <= lo:
        return BLOCKS[len(BLOCKS) // 2]
    k = int((v - lo) / (hi - lo) * (len(BLOCKS) - 1) + 0.5)
    return BLOCKS[max(0, min(len(BLOCKS) - 1, k))]


def envelope_chart(cand: Sequence[float], lo: Sequence[float], hi: Sequence[float],
                   width: int, label: str = "") -> Text:
    c, lo_r, hi_r = resample(cand, width), resample(lo, width), resample(hi, width)
    finite = [v for v in (*c, *lo_r, *hi_r) if math.isfinite(v)]
    out = Text(no_wrap=True)
    if not finite:
        out.append("no data yet", style="dim")
        return out
    vmin, vmax = min(finite), max(finite)
    out.append("cand ", style="bold")
    for i, v in enumerate(c):
        a = lo_r[i] if i < len(lo_r) else math.nan
        b = hi_r[i] if i < len(hi_r) else math.nan
        outside = math.isfinite(v) and math.isfinite(a) and math.isfinite(b) and not a <= v <= b
        out.append(_block(v, vmin, vmax), style="bold red" if outside else "#61afef")
    out.append("\nref  ", style="bold")
    for a, b in zip(lo_r, hi_r, strict=False):
        mid = (a + b) / 2 if math.isfinite(a) and math.isfinite(b) else math.nan
        out.append(_block(mid, vmin, vmax), style="#7f8790")
    out.append(f"\n     {label} {_fmt(vmin)} … {_fmt(vmax)}", style="dim")
    return out


def envelope_from_runs(series: list[tuple[Sequence[float], Sequence[float]]]
                       ) -> tuple[list[float], list[float], list[float]]:
    """(steps, lo, hi) across reference runs, step by step over the steps they share."""
    if not series:
        return [], [], []
    maps = [dict(zip(steps, vals, strict=False)) for steps, vals in series]
    common = sorted(set(maps[0]).intersection(*maps[1:]))
    lo, hi = [], []
    for s in common:
        vals = [m[s] for m in maps if math.isfinite(m[s])]
        lo.append(min(vals) if vals else math.nan)
        hi.append(max(vals) if vals else math.nan)
    return common, lo, hi


def _fmt(v: float) -> str:
    return f"{v:.4g}"
