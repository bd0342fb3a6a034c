"""Facts of a run's first rows, carried from one live pass to the next.

A live snapshot (records_fold.py) hands the checks its series' memo (`derived.live`, memo.py): the
same one on every pass, over rows that are only ever appended. A reference cut at the
candidate's last step (`RunRecords.upto`) is its parent's first k rows, and k grows as the
candidate does. A fact that folds row by row (counts, the smallest few distinct values, sums of
integers) is kept in that memo with the number of rows it covers, so a pass folds only the rows
added since. Any other RunRecords folds all its rows at once through the same code: the live
answer and the rebuilt one come from one fold, and the property tests
(tests/unit/test_records_fold.py) check that chunks fold to the whole.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .memo import FoldKey, LiveMemo, same_runs

OFF = "off"  # a fold's state that gave up carrying (the caller then computes the whole)


def home(r: Any) -> tuple[LiveMemo, Any]:
    """Where r's carried facts live, and a run holding r's rows at the same positions."""
    cut = r.derived.cut_of
    if cut is not None:  # r is parent's first rows
        return home(cut[0])
    live = r.derived.live
    if live is not None:
        return live, r
    if r.derived.carried is None:
        r.derived.carried = LiveMemo()
    return r.derived.carried, r


def folded(r: Any, key: FoldKey, start: Callable[[], Any],
           fold: Callable[[Any, Any, int, int], Any], n: int | None = None,
           of: tuple[Any, ...] = ()) -> Any:
    """The state `fold(state, src, a, b)` reaches over rows 0..n-1 of r (n: r.n), from
    `start()`, folding rows a..b-1 of `src` (they are r's rows a..b-1) on top of a state over
    rows 0..a-1. Kept in r's home, so the next call folds only rows added since; a call over
    fewer rows than the kept state covers starts again (and keeps that: a new candidate cuts
    the references from their start), as does one about other runs `of` than the kept state
    (a fact of r against a reference keeps that reference). `fold` may return OFF, which
    stays."""
    memo, src = home(r)
    n = r.n if n is None else n
    got = memo.folds.get(key)
    if got is None or got[0] > n or not same_runs(got[2], of):
        got = (0, start(), of)
    done, st, _ = got
    if st is not OFF and done < n:
        st = fold(st, src, done, n)
    memo.folds[key] = (n, st, of)
    return st


def grown(cap: int, need: int) -> int:
    """The rows to allocate when an array of `cap` rows must hold `need`: a sixteenth more.
    A long run's arrays then hold at most ~6% unused rows (doubling left up to half of each
    empty: ~80 MB of the fold at 1M steps x 8 ranks), still amortised O(1): each row is
    copied ~16 times over the run, a memcpy (~1% of the fold's CPU)."""
    return max(need, cap + cap // 16, 1024)


class Buf:
    """An array that grows at its end (see `grown`); `view()` is read-only. With `keep`, only
    the last `keep` values are needed from one extend to the next (a rolling window's running
    sums): each extend drops the older ones, so it holds the last keep + the new values, not
    the run. `a[j]` is value `off + j`."""

    def __init__(self, dtype: Any, first: Any = (), keep: int | None = None) -> None:
        self.a = np.zeros(1024, dtype)
        self.n = 0
        self.off = 0
        self.keep = keep
        self.extend(np.asarray(first, dtype))

    def extend(self, v: np.ndarray) -> None:
        held = self.n - self.off
        if self.keep is not None:  # the last `keep` and v, nothing more: O(keep + new) a call
            lo = max(self.off, self.n - self.keep)
            out = np.empty(self.n - lo + v.size, self.a.dtype)
            out[: self.n - lo] = self.a[lo - self.off: held]
            out[self.n - lo:] = v
            self.a, self.off = out, lo
        else:
            if held + v.size > self.a.size:
                bigger = np.zeros(grown(self.a.size, held + v.size), self.a.dtype)
                bigger[:held] = self.a[:held]
                self.a = bigger  # views handed out keep the old array: they never change
            self.a[held: held + v.size] = v
        self.n += v.size

    def accumulate(self, v: np.ndarray) -> None:
        """Extend by the running sum of v continued from the last value, with the very
        additions np.cumsum makes over the whole (it adds in order): the same bits."""
        if self.n == 0:
            self.extend(np.cumsum(v))
        else:
            last = self.n - 1 - self.off
            self.extend(np.cumsum(np.concatenate((self.a[last: last + 1], v)))[1:])

    def view(self) -> np.ndarray:
        out = self.a[: self.n - self.off]
        out.flags.writeable = False
        return out


def hist_median(hist: dict[Any, int]) -> float:
    """np.median of the values `hist` counts (value -> count), the two middle ones of an even
    count averaged by np.median itself: the same bits as over the values."""
    m = sum(hist.values())
    want = [m // 2 - 1, m // 2] if m % 2 == 0 else [m // 2]
    got, seen = [], 0
    for x in sorted(hist):
        c = hist[x]
        got += [x for i in want if seen <= i < seen + c]
        seen += c
    return float(np.median(np.array(got)))


def counted(hist: dict[Any, int], vals: np.ndarray) -> dict[Any, int]:
    """A new histogram: hist plus vals."""
    v, c = np.unique(vals, return_counts=True)
    out = dict(hist)
    for x, k in zip(v.tolist(), c.tolist(), strict=True):
        out[x] = out.get(x, 0) + k
    return out
