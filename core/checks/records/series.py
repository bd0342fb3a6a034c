"""Series helpers the numeric checks share: the steps every run has, rolling means and step
noise, runs of True, downsampling for sparklines. Pure numpy, safe on partial series."""

from __future__ import annotations

import math
import warnings

import numpy as np

from . import carry
from .records import RunRecords
from .steps import arange, index_of, intersect

SPARK_POINTS = 48


def common_steps(runs: list[RunRecords]) -> tuple[np.ndarray, list[slice | np.ndarray]]:
    """Steps present in every run, and each run's selector (a slice on the fast path, so no
    copy) of them."""
    if not runs:
        return np.zeros(0, np.int64), []
    # Fast path: every run logs 0..n-1 (the usual case) — the common steps are a prefix.
    # (n strictly increasing ints from 0 to n-1 are 0..n-1.)
    if all(r.n == 0 or (r.steps[0] == 0 and r.steps[-1] == r.n - 1) for r in runs) and all(
            r.steps_increasing() for r in runs):
        k = min(r.n for r in runs)
        return arange(k), [slice(0, k) for _ in runs]
    common = runs[0].steps
    inc = runs[0].steps_increasing()
    for r in runs[1:]:
        common = intersect(common, r.steps, inc, r.steps_increasing())
        inc = True  # sorted and unique from here on
    out: list[slice | np.ndarray] = []
    for r in runs:
        out.append(index_of(common, r.steps, r.steps_increasing()) if inc
                   else np.intersect1d(common, r.steps, return_indices=True)[2])
    return common, out


def rolling_mean(x: np.ndarray, w: int) -> np.ndarray:
    """Trailing mean over the last `w` steps (fewer at the start), skipping non-finite values
    (NaN where a window has none). Causal, so a partial series gets the same values as the
    full one at the same steps."""
    if w <= 1 or x.size == 0:
        return x.copy()
    fin = np.isfinite(x)
    if fin.all():  # fast path: plain cumulative sums, slices only
        cs = np.cumsum(x)
        out = np.empty_like(x)
        k = min(w, x.size)
        out[:k] = cs[:k] / np.arange(1, k + 1)
        out[k:] = (cs[k:] - cs[:-k]) / w
        return out
    cs = np.concatenate(([0.0], np.cumsum(np.where(fin, x, 0.0))))
    cn = np.concatenate(([0], np.cumsum(fin)))
    hi = np.arange(1, x.size + 1)
    lo = np.maximum(hi - w, 0)
    cnt = (cn[hi] - cn[lo]).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = (cs[hi] - cs[lo]) / cnt
    mean[cnt == 0] = np.nan
    return mean


def smoothed(r: RunRecords, name: str, w: int) -> np.ndarray:
    """`rolling_mean(r.series(name), w)`. On a live run's snapshot (records_fold.py) the
    sums are carried from the last pass and only the new steps are added: O(new), with
    rolling_mean's arithmetic, so the values are the same to the bit."""
    x = r.series(name)
    live = r.derived.live
    if live is None or w <= 1 or x.size == 0:
        return rolling_mean(x, w)
    memo, key = live.roll, (name, w)
    st = memo.get(key)
    n0 = 0 if st is None else st["n"]
    new = x[n0:]
    fast = (st is None or st["fast"]) and bool(np.isfinite(new).all())
    if st is None or n0 > x.size or (st["fast"] and not fast):
        # rolling_mean takes another formula once a value is not finite: start again with it
        fast = bool(np.isfinite(x).all())
        st, n0, new = {"n": 0, "fast": fast, "out": carry.Buf(np.float64)}, 0, x
        # The sums are read back at most w rows before the new ones: only those are kept.
        if not fast:  # as rolling_mean builds them: a leading 0, then the sums
            st["cs"] = carry.Buf(np.float64, [0.0], keep=w)
            st["cn"] = carry.Buf(np.int64, [0], keep=w)
        else:
            st["cs"] = carry.Buf(np.float64, keep=w)
    i = np.arange(n0, x.size)
    if fast:
        st["cs"].accumulate(new)
        cs, off = st["cs"].a, st["cs"].off  # cs[j] is the sum of the first off + j + 1
        part = np.empty(i.size)
        small = i < w
        part[small] = cs[i[small] - off] / (i[small] + 1).astype(np.float64)
        big = i[~small]
        part[~small] = (cs[big - off] - cs[big - w - off]) / w
    else:
        fin = np.isfinite(new)
        if n0 == 0:  # the first sum is the first value itself (0.0 + -0.0 is 0.0)
            st["cs"].extend(np.cumsum(np.where(fin, new, 0.0)))
            st["cn"].extend(np.cumsum(fin))
        else:
            st["cs"].accumulate(np.where(fin, new, 0.0))
            st["cn"].accumulate(fin.astype(np.int64))
        cs, cn, off, c_off = st["cs"].a, st["cn"].a, st["cs"].off, st["cn"].off
        hi = i + 1
        lo = np.maximum(hi - w, 0)
        cnt = (cn[hi - c_off] - cn[lo - c_off]).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            part = (cs[hi - off] - cs[lo - off]) / cnt
        part[cnt == 0] = np.nan
    st["out"].extend(part)
    st["n"] = x.size
    memo[key] = st
    return st["out"].view()


def rolling_median(x: np.ndarray, w: int) -> np.ndarray:
    """Trailing median over the finite values of the last `w` steps (fewer at the start; NaN
    where a window has none). Causal like rolling_mean; a spike that fills less than half a
    window does not move it, where it lifts a mean for `w` steps."""
    if w <= 1 or x.size == 0:
        return x.copy()
    pad = np.concatenate((np.full(w - 1, np.nan), x))
    win = np.lib.stride_tricks.sliding_window_view(pad, w)
    out = np.empty(x.size)
    k = min(w - 1, x.size)
    with warnings.catch_warnings():  # an all-NaN window is NaN, as it should be
        warnings.simplefilter("ignore", RuntimeWarning)
        out[:k] = np.nanmedian(win[:k], axis=1)
        rest = win[k:]
        if rest.size:
            out[k:] = np.median(rest, axis=1) if np.isfinite(x).all() else \
                np.nanmedian(rest, axis=1)
    return out


def smoothed_median(r: RunRecords, name: str, w: int) -> np.ndarray:
    """`rolling_median(r.series(name), w)`; on a live run's snapshot only the new steps (and
    the `w` - 1 before them) are read: O(new · w) a pass, the same values."""
    x = r.series(name)
    live = r.derived.live
    if live is None or w <= 1 or x.size == 0:
        return rolling_median(x, w)
    key = ("median", name, w)
    st = live.roll.get(key)
    if st is None or st["n"] > x.size:
        st = {"n": 0, "out": carry.Buf(np.float64)}
    n0 = st["n"]
    if n0 < x.size:
        a = max(0, n0 - (w - 1))
        st["out"].extend(rolling_median(x[a:], w)[n0 - a:] if a == 0 else
                         _median_tail(x[a:], w))
        st["n"] = x.size
    live.roll[key] = st
    return st["out"].view()


def _median_tail(x: np.ndarray, w: int) -> np.ndarray:
    """The trailing medians of x's points from w - 1 on (each window full of x's own)."""
    win = np.lib.stride_tricks.sliding_window_view(x, w)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.median(win, axis=1) if np.isfinite(x).all() else np.nanmedian(win, axis=1)


def step_noise(x: np.ndarray, w: int) -> np.ndarray:
    """Local per-step noise σ from the trailing mean |Δx| (σ = mean|Δ|·√π/2 for Gaussian noise;
    a trend only makes it larger, i.e. more lenient)."""
    if x.size < 2:
        return np.zeros_like(x)
    d = np.empty_like(x)
    np.abs(np.diff(x), out=d[1:])
    d[0] = d[1]  # no difference at the first step: borrow the second
    m = rolling_mean(d, w)
    if not np.isfinite(m.sum()):
        m[~np.isfinite(m)] = 0.0
    return m * (math.sqrt(math.pi) / 2.0)


def true_runs(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Starts and (exclusive) ends of the runs of True in a bool array."""
    d = np.diff(np.concatenate(([0], mask.astype(np.int8), [0])))
    return np.flatnonzero(d == 1), np.flatnonzero(d == -1)


def downsample(x: np.ndarray, k: int = SPARK_POINTS) -> list[float]:
    """At most k points, evenly spaced (including the last), for a sparkline."""
    if x.size <= k:
        return x.tolist()
    return x[np.linspace(0, x.size - 1, k).round().astype(np.int64)].tolist()
