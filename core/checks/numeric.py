"""Numeric checks over step series: drift, learning rate, clipping, non-finite values, goal,
speed. All vectorised; every function is pure and safe on partial series."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from portside.core.log.criteria import Criteria

from . import carry, drift_rate
from .alarms import Alarm
from .progress import align, has_progress, map_to, steps_per_epoch
from .records import RunRecords
from .steps import arange, index_of, intersect

SPARK_POINTS = 48
LR_RTOL = 1e-6  # float noise between schedulers computing the same lr


# --- helpers ---------------------------------------------------------------------------------


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
    """`rolling_mean(r.series(name), w)`. On a live run's snapshot (records_live.py) the
    sums are carried from the last pass and only the new steps are added: O(new), with
    rolling_mean's arithmetic, so the values are the same to the bit."""
    x = r.series(name)
    memo: dict[Any, Any] | None = r._cache.get(("live",))
    if memo is None or w <= 1 or x.size == 0:
        return rolling_mean(x, w)
    key = ("roll", name, w)
    st = memo.get(key)
    n0 = 0 if st is None else st["n"]
    new = x[n0:]
    fast = (st is None or st["fast"]) and bool(np.isfinite(new).all())
    if st is None or n0 > x.size or (st["fast"] and not fast):
        # rolling_mean takes another formula once a value is not finite: start again with it
        fast = bool(np.isfinite(x).all())
        st, n0, new = {"n": 0, "fast": fast, "out": carry.Buf(np.float64)}, 0, x
        if not fast:  # as rolling_mean builds them: a leading 0, then the sums
            st["cs"], st["cn"] = carry.Buf(np.float64, [0.0]), carry.Buf(np.int64, [0])
        else:
            st["cs"] = carry.Buf(np.float64)
    i = np.arange(n0, x.size)
    if fast:
        st["cs"].accumulate(new)
        cs = st["cs"].a
        part = np.empty(i.size)
        small = i < w
        part[small] = cs[i[small]] / (i[small] + 1).astype(np.float64)
        big = i[~small]
        part[~small] = (cs[big] - cs[big - w]) / w
    else:
        fin = np.isfinite(new)
        if n0 == 0:  # the first sum is the first value itself (0.0 + -0.0 is 0.0)
            st["cs"].extend(np.cumsum(np.where(fin, new, 0.0)))
            st["cn"].extend(np.cumsum(fin))
        else:
            st["cs"].accumulate(np.where(fin, new, 0.0))
            st["cn"].accumulate(fin.astype(np.int64))
        cs, cn = st["cs"].a, st["cn"].a
        hi = i + 1
        lo = np.maximum(hi - w, 0)
        cnt = (cn[hi] - cn[lo]).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            part = (cs[hi] - cs[lo]) / cnt
        part[cnt == 0] = np.nan
    st["out"].extend(part)
    st["n"] = x.size
    memo[key] = st
    return st["out"].view()


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


def _f(x: Any) -> float:
    return float(x)


# --- numeric-drift ---------------------------------------------------------------------------


def _cached(r: RunRecords, key: tuple, make: Any) -> np.ndarray:
    """Per-run memo of derived full-length series. Records are treated as immutable once built;
    references are re-checked on every live call, so this makes their cost a one-off."""
    val = r._cache.get(key)
    if val is None:
        val = r._cache[key] = make()
    return val


def _envelope(refs: list[RunRecords], sel: list[slice | np.ndarray], name: str, smooth: int,
              noise_w: int, gap: int = 1) -> tuple[np.ndarray, ...] | None:
    """Min, max, mean and variance (ddof 1) over references of the smoothed series at the
    common steps, and their mean step noise σ (zeros when noise_w is 0); None when no
    reference reports the series. Smoothing is causal, so a run's full smoothed series cut at
    the common steps equals the smoothing of the cut series."""
    m = _sel_len(sel[0], refs[0])
    lo = np.full(m, np.nan)
    hi = np.full(m, np.nan)
    sigma = np.zeros(m)
    rows = np.empty((len(refs), m))
    for i, (r, s) in enumerate(zip(refs, sel, strict=True)):
        sm = _cached(r, ("smooth", name, smooth), lambda r=r: rolling_mean(r.series(name), smooth))[s]
        rows[i] = sm
        np.fmin(lo, sm, out=lo)  # fmin/fmax skip NaN (a reference missing a step)
        np.fmax(hi, sm, out=hi)
        if noise_w:
            sigma += _cached(r, ("noise", name, noise_w, gap),
                             lambda r=r: _sparse_noise(r.series(name), noise_w, gap))[s]
    if np.isnan(lo).all():
        return None
    with np.errstate(invalid="ignore"):
        mean = rows.mean(axis=0)
        var = rows.var(axis=0, ddof=1) if len(refs) > 1 else np.full(m, np.nan)
    return lo, hi, sigma / len(refs), mean, var


def _calibration(refs: list[RunRecords], dc: Any, how: _How,
                 alpha: float) -> drift_rate.Calibration | None:
    """drift_rate.calibrate over the references' own common steps (they are complete: the
    same for every pass of a live candidate), memoised with the references it was made of."""
    key = ("drift_cal", how.name, dc.smooth, how.gap, how.noise_w, alpha, len(refs))
    got = refs[0]._cache.get(key)
    if got is not None and len(got[0]) == len(refs) and all(
            a is b for a, b in zip(got[0], refs, strict=True)):
        return got[1]
    g = how.gap
    _, sel = common_steps(refs)
    env = _envelope(refs, sel, how.name, dc.smooth * g, how.noise_w, g)
    cal = None
    if env is not None:
        rows = np.stack([_cached(r, ("smooth", how.name, dc.smooth * g), lambda: None)[s]
                         for r, s in zip(refs, sel, strict=True)])
        n_at = np.arange(1, rows.shape[1] + 1)
        noise = env[2] / np.sqrt(np.clip(n_at / g, 1, dc.smooth))
        cal = drift_rate.calibrate(rows, noise, dc.smooth, g, alpha)
    refs[0]._cache[key] = (list(refs), cal)
    return cal


def sample_gap(runs: list[RunRecords], name: str) -> int:
    """The widest typical spacing, in records, between a series' values over these runs: 1 when
    every step has one. The probe thins its own gradient norm on cheap steps (every k-th step
    on the CPU, every 10th or more on torch_xla), and a 10-step mean over a series with a value
    every 50 steps is mostly empty, which would blind the drift check to it."""
    gap = 1
    for r in runs:
        gap = max(gap, _gap(r, name))
    return gap


def _gap(r: RunRecords, name: str) -> int:
    def make() -> int:
        st = carry.folded(r, ("gap", name), lambda: {"last": -1, "fin": 0, "diffs": {}},
                          lambda st, src, a, b: _gap_rows(st, src.series(name), a, b))
        if st["fin"] == r.n:  # a value at every step: the gap is 1 without the median
            return 1
        if st["diffs"] is carry.OFF:  # many distinct spacings: the median of them all
            at = np.flatnonzero(np.isfinite(r.series(name)))
            return int(np.median(np.diff(at))) if at.size >= 2 else 1
        return int(carry.hist_median(st["diffs"])) if st["fin"] >= 2 else 1

    # memoised: references are asked on every live pass; a live run's spacings are carried
    return max(int(_cached(r, ("gap", name), make)), 1)


_GAPS_MAX = 256  # distinct spacings a carried histogram keeps


def _gap_rows(st: dict[str, Any], x: np.ndarray, a: int, b: int) -> dict[str, Any]:
    """Spacings between finite values over rows a..b-1, counted (a histogram)."""
    at = np.flatnonzero(np.isfinite(x[a:b])) + a
    out = {"last": st["last"], "fin": st["fin"] + int(at.size), "diffs": st["diffs"]}
    if not at.size:
        return out
    if out["diffs"] is not carry.OFF:
        d = np.diff(at) if st["last"] < 0 else np.diff(np.concatenate(([st["last"]], at)))
        if d.size:
            hist = carry.counted(st["diffs"], d)
            out["diffs"] = hist if len(hist) <= _GAPS_MAX else carry.OFF
    out["last"] = int(at[-1])
    return out


def _sparse_noise(x: np.ndarray, w: int, gap: int) -> np.ndarray:
    """step_noise over the values a sparse series has, held until the next value: the noise
    between samples, not between steps that mostly have none."""
    if gap <= 1:
        return step_noise(x, w)
    at = np.flatnonzero(np.isfinite(x))
    out = np.zeros_like(x)
    if at.size < 2:
        return out
    vals = step_noise(x[at], w)  # w counted in samples here
    held = np.searchsorted(at, np.arange(x.size), side="right") - 1
    ok = held >= 0
    out[ok] = vals[held[ok]]
    return out


def _sel_len(s: slice | np.ndarray, r: RunRecords) -> int:
    return len(range(*s.indices(r.n))) if isinstance(s, slice) else int(s.size)


def check_drift(refs: list[RunRecords], cand: RunRecords, criteria: Criteria) -> list[Alarm]:
    """Smoothed candidate series outside the reference envelope. With `acceptance.drift_alpha`
    and two references or more (drift_rate.py): the band around the references' mean
    calibrated to that false-alarm rate over the whole run (at least [min, max] widened by
    rtol·max(|lo|, |hi|) + atol), one sample outside is the alarm. Else the fixed envelope,
    for `window` consecutive common steps: [min, max] over references of the same smoothing,
    widened by rtol·max(|lo|, |hi|) + atol + noise_z·σ, where σ is the references' step noise
    divided by √(points in the smoothing window)."""
    if not refs or cand.n == 0:
        return []
    dc = criteria.drift
    al = align(cand, refs, common_steps)
    steps, idx = al.steps, al.sel
    if steps.size < dc.window:
        return []
    noise_w = max(4 * dc.smooth, 20)
    # drift_rate.py: the rate split over the series judged; two references at least
    alpha = criteria.acceptance.drift_alpha / len(dc.series) if len(refs) >= 2 else 0.0
    c_smooth = _progress_smooth(cand, refs, dc.smooth) if al.mode == "progress" else dc.smooth
    memo: dict[Any, Any] | None = cand._cache.get(("live",))
    if memo is None:
        memo = {}  # not a live snapshot: nothing is carried
    k = steps.size
    # A live run judged by step (every selector the prefix 0..k-1): each point's verdict is
    # fixed once its step is in every run, so a pass need only look at the new points and the
    # `window` before them for a long excursion; the full evidence is built when there is one.
    tail = ("live",) in cand._cache and al.mode == "step" and all(
        isinstance(s, slice) and s.start in (0, None) for s in idx)
    alarms = []
    for name in dc.series:
        # A thinned series is smoothed over `smooth` of its values, not steps, and must stay
        # out for a few of its values: the same test, counted in samples.
        gap = sample_gap([cand, *refs], name)
        window = dc.window if gap == 1 else max(dc.window, 2 * gap)
        how = _How(name, c_smooth, gap, window, noise_w)
        if alpha and _calibration(refs, dc, replace(how, alpha=alpha), alpha) is not None:
            # The calibrated band is a max-statistic: one sample outside it is the alarm.
            how = replace(how, window=gap, alpha=alpha)
        key = ("drift", dc.rtol, dc.atol, dc.smooth, dc.noise_z, how)
        seen = memo.get(key) if tail else None
        if seen is not None and seen[1] == tuple(map(id, refs)) and seen[0] <= k:
            a = max(0, seen[0] - window)
            if not _long_excursion(refs, cand, dc, how, a, k):
                memo[key] = (k, seen[1], refs)  # refs kept: their ids stay theirs
                continue
        found = _drift_alarm(refs, cand, dc, how, al)
        if found is None:
            if tail:
                memo[key] = (k, tuple(map(id, refs)), refs)
            continue
        alarms.append(found)
    return alarms


@dataclass(frozen=True)
class _How:
    """How one series is judged: its name, the candidate's smoothing, the sample gap, the
    window (in steps), the noise window and the calibrated band's alpha (0: fixed rule)."""
    name: str
    c_smooth: int
    gap: int
    window: int
    noise_w: int
    alpha: float = 0.0


def _excess(refs: list[RunRecords], cand: RunRecords, dc: Any, how: _How,
            sel_c: slice | np.ndarray, sel_r: list[slice | np.ndarray], n_at: np.ndarray,
            ) -> tuple[Any, ...] | None:
    """Smoothed candidate, widened envelope (lo, hi), raw hi and the excess over it at the
    selected points; n_at: each point's position in the compared series (from 1). With
    `how.alpha` (drift_rate.py) the envelope is also at least the calibrated band; its
    Calibration comes last (None: the fixed envelope alone). None when one side does not
    report the series."""
    g = how.gap
    cal = _calibration(refs, dc, how, how.alpha) if how.alpha else None
    noise_w = how.noise_w if (dc.noise_z or cal is not None) else 0
    c_s = smoothed(cand, how.name, how.c_smooth * g)[sel_c]
    env = _envelope(refs, sel_r, how.name, dc.smooth * g, noise_w, g)
    if env is None or not np.isfinite(c_s).any():
        return None
    lo, hi, sigma, mean, var = env
    widen = dc.rtol * np.maximum(np.abs(lo), np.abs(hi)) + dc.atol
    n_eff = np.clip(n_at / g, 1, dc.smooth)
    if cal is None and dc.noise_z:
        widen = widen + dc.noise_z * sigma / np.sqrt(n_eff)
    elo, ehi = lo - widen, hi + widen
    if cal is not None:
        # The references' pooled spread: their own (the same for every pass) where the
        # selection is a prefix of their steps, else pooled over the selected points.
        spread2 = (cal.spread2[sel_r[0]] if all(isinstance(s, slice) for s in sel_r)
                   else drift_rate.pooled(var, dc.smooth * g))
        half = cal.u * cal.sd(spread2, (sigma / np.sqrt(n_eff)) ** 2) \
            * math.sqrt(1 + 1 / len(refs))
        np.fmin(elo, mean - half, out=elo)
        np.fmax(ehi, mean + half, out=ehi)
    with np.errstate(invalid="ignore"):
        excess = np.maximum(c_s - ehi, elo - c_s)  # > 0 outside; NaN where unknown
    return c_s, elo, ehi, hi, excess, cal


def _long_excursion(refs: list[RunRecords], cand: RunRecords, dc: Any, how: _How, a: int,
                    k: int) -> bool:
    """`window` consecutive points outside among points a..k-1 (the same values as the
    whole series has there: smoothing is causal, the envelope is per point)."""
    got = _excess(refs, cand, dc, how, slice(a, k), [slice(a, k)] * len(refs),
                  np.arange(a + 1, k + 1))
    if got is None:
        return False  # nothing to compare here: nothing outside here
    starts, ends = true_runs(got[4] > 0)
    return bool(((ends - starts) >= how.window).any())


def _drift_alarm(refs: list[RunRecords], cand: RunRecords, dc: Any, how: _How,
                 al: Any) -> Alarm | None:
    """The drift alarm of one series over the whole aligned series, or None."""
    steps, idx = al.steps, al.sel
    name, window, gap = how.name, how.window, how.gap
    got = _excess(refs, cand, dc, how, idx[0], idx[1:], np.arange(1, steps.size + 1))
    if got is None:
        return None  # the series is not reported by one side
    c_s, elo, ehi, hi, excess, cal = got
    starts, ends = true_runs(excess > 0)
    long = (ends - starts) >= window
    if not long.any():
        return None
    s0, e0 = starts[long], ends[long]
    first = int(s0[0])
    # Worst point over the qualifying runs, relative to the envelope's scale.
    in_long = np.zeros(steps.size, bool)
    for a, b in zip(s0, e0, strict=True):
        in_long[a:b] = True
    scale = np.maximum(np.abs(ehi - elo), np.abs(hi)) + dc.atol
    rel = np.where(in_long, excess / scale, -np.inf)
    worst = int(np.argmax(rel))
    direction = "above" if c_s[first] > ehi[first] else "below"
    return Alarm(
        "numeric-drift", "error",
        f"{name} leaves the reference envelope from step {int(steps[first])} "
        f"({direction}, {int(in_long.sum())} steps out)",
        {
            "series": name, "first_step": int(steps[first]),
            "alarm_step": int(steps[first + window - 1]),
            "worst_step": int(steps[worst]), "direction": direction,
            "steps_out": int(in_long.sum()), "window": window, "smooth": dc.smooth * gap,
            "sample_gap": gap,
            "value_first": _f(c_s[first]), "envelope_first": [_f(elo[first]), _f(ehi[first])],
            "value_worst": _f(c_s[worst]), "envelope_worst": [_f(elo[worst]), _f(ehi[worst])],
            "reference_runs": len(refs), "aligned_by": al.mode,
            "rate": (cal.evidence(len(refs), len(dc.series)) if cal is not None else
                     {"rule": "fixed envelope (rtol, atol, noise_z, window): no rate stated",
                      "alpha": None}),
            "spark": {"steps": downsample(steps), "candidate": downsample(c_s),
                      "lo": downsample(elo), "hi": downsample(ehi)},
        },
        key=f"numeric-drift:{name}")


def _progress_smooth(cand: RunRecords, refs: list[RunRecords], smooth: int) -> int:
    """The candidate's smoothing window over the same span of training as the references'
    `smooth` steps: with half the steps per epoch (a doubled global batch) a 10-step mean
    would cover twice the progress and lag behind a falling loss."""
    c, r = steps_per_epoch(cand), steps_per_epoch(refs[0])
    done = [e for e in c if e in r and e != max(c) and e != max(r)] or [e for e in c if e in r]
    if not done:
        return smooth
    e = done[0]
    return max(1, round(smooth * c[e] / max(r[e], 1)))


# --- lr-schedule-changed ---------------------------------------------------------------------


def _lr_by_step(cand: RunRecords, r: RunRecords) -> dict[str, Any] | None:
    """First learning-rate difference at the same step index; None when they agree (or
    cannot be compared)."""
    steps, (ic, ir) = common_steps([cand, r])
    if steps.size == 0:
        return None
    g = min(cand.lr_all.shape[1], r.lr_all.shape[1])
    c, rv = cand.lr_all[ic, :g], r.lr_all[ir, :g]
    if isinstance(ic, slice) and isinstance(ir, slice):  # the common steps are both prefixes
        # Each row's verdict is fixed once both runs have it: carried (carry.py), the
        # reference kept in the state so its id stays its own.
        st = carry.folded(cand, ("lr_by_step", id(r), g), lambda: {"ref": r, "both": False,
                                                                     "bad": 0, "first": None},
                          lambda st, src, a, b: _lr_rows(st, src, r, g, a, b), n=steps.size)
        if not st["both"] or st["first"] is None:
            return None
        i, grp = st["first"]
        return _lr_found(i, grp, st["bad"], steps, c, rv, cand, r, "step")
    both = np.isfinite(c) & np.isfinite(rv)
    if not both.any():
        return None
    return _lr_evidence(_lr_differs(c, rv, both), steps, c, rv, rv, cand, r, "step")


def _lr_differs(c: np.ndarray, rv: np.ndarray, both: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return both & (np.abs(c - rv) > LR_RTOL * np.maximum(np.abs(c), np.abs(rv)) + 1e-12)


def _lr_rows(st: dict[str, Any], cand: RunRecords, r: RunRecords, g: int, a: int,
             b: int) -> dict[str, Any]:
    c, rv = cand.lr_all[a:b, :g], r.lr_all[a:b, :g]
    both = np.isfinite(c) & np.isfinite(rv)
    bad = _lr_differs(c, rv, both)
    rows = bad.any(axis=1)
    out = {**st, "both": st["both"] or bool(both.any()), "bad": st["bad"] + int(rows.sum())}
    if out["first"] is None and rows.any():
        i = int(np.argmax(rows))
        out["first"] = (a + i, int(np.argmax(bad[i])))
    return out


def _lr_by_progress(cand: RunRecords, r: RunRecords) -> dict[str, Any] | None:
    """The same by training progress: the candidate's lr must lie within the reference's at
    the nearest-progress step and its two neighbours (a per-step schedule sampled at 62
    instead of 63 points per epoch falls between the reference's values)."""
    m = map_to(cand, r)
    ok = m >= 0
    if not ok.any():
        return None
    g = min(cand.lr_all.shape[1], r.lr_all.shape[1])
    j = m[ok]
    c = cand.lr_all[ok, :g]
    lo = hi = r.lr_all[j, :g]
    for d in (-1, 1):
        nb = r.lr_all[np.clip(j + d, 0, r.n - 1), :g]
        lo, hi = np.fmin(lo, nb), np.fmax(hi, nb)
    both = np.isfinite(c) & np.isfinite(lo)
    if not both.any():
        return None
    # Widened by the reference's own change over those steps: a schedule sampled at other
    # points (a peak between two of the reference's steps, warmup counted in steps) stays in;
    # a constant stretch (a per-epoch schedule inside an epoch) is compared exactly.
    tol = LR_RTOL * np.maximum(np.abs(lo), np.abs(hi)) + 1e-12 + (hi - lo)
    with np.errstate(invalid="ignore"):
        diff = both & ((c < lo - tol) | (c > hi + tol))
    return _lr_evidence(diff, cand.steps[ok], c, r.lr_all[j, :g], lo, cand, r, "progress")


def _lr_evidence(diff: np.ndarray, steps: np.ndarray, c: np.ndarray, rv: np.ndarray,
                 _lo: np.ndarray, cand: RunRecords, r: RunRecords,
                 mode: str) -> dict[str, Any] | None:
    bad_rows = diff.any(axis=1)
    if not bad_rows.any():
        return None
    i = int(np.argmax(bad_rows))
    return _lr_found(i, int(np.argmax(diff[i])), int(bad_rows.sum()), steps, c, rv, cand, r,
                     mode)


def _lr_found(i: int, grp: int, n_bad: int, steps: np.ndarray, c: np.ndarray, rv: np.ndarray,
              cand: RunRecords, r: RunRecords, mode: str) -> dict[str, Any]:
    return {"first_step": int(steps[i]), "group": grp,
            "candidate_lr": _f(c[i, grp]), "reference_lr": _f(rv[i, grp]),
            "steps_differing": n_bad, "steps_compared": int(steps.size),
            "groups": [int(cand.lr_all.shape[1]), int(r.lr_all.shape[1])], "aligned_by": mode,
            "scheduler_steps": [_last_finite(cand.col("sched_steps")),
                                _last_finite(r.col("sched_steps"))],
            "spark": {"steps": downsample(steps), "candidate": downsample(c[:, 0]),
                      "reference": downsample(rv[:, 0])}}


def _last_finite(x: np.ndarray) -> float:
    fin = x[np.isfinite(x)]
    return float(fin[-1]) if fin.size else 0.0


def check_lr(refs: list[RunRecords], cand: RunRecords) -> list[Alarm]:
    """The candidate's learning rates differ (beyond float noise) from every reference's, both
    at the same step index and at the same training progress (when the probe recorded epochs):
    a schedule that is the same function of steps, or of progress, passes. Series lengths alone
    are not compared: a short candidate is partial or crashed."""
    if not refs or cand.n == 0:
        return []
    best: dict[str, Any] | None = None
    for r in refs:
        by_step = _lr_by_step(cand, r)
        if by_step is None:
            return []  # matches at least one reference (or nothing to compare)
        if has_progress(cand) and has_progress(r):
            by_prog = _lr_by_progress(cand, r)
            if by_prog is None:
                return []
            by_step = by_prog if steps_per_epoch(cand) != steps_per_epoch(r) else by_step
        if best is None:
            best = by_step
    assert best is not None
    sc, sr = best["scheduler_steps"]
    why = ""
    if sc == 0 and sr > 1:
        why = f" (candidate steps no LR scheduler; reference stepped one {sr:g} times)"
    return [Alarm("lr-schedule-changed", "error",
                  f"learning rate differs from step {best['first_step']}: "
                  f"{best['candidate_lr']:.6g} vs reference {best['reference_lr']:.6g}{why}",
                  best, key="lr-schedule-changed")]


# --- non-finite ------------------------------------------------------------------------------


def check_nonfinite(refs: list[RunRecords], cand: RunRecords) -> list[Alarm]:
    alarms = []
    for name, mask, vals in (("loss", cand.loss_nonfinite, cand.loss),
                             ("grad_norm", cand.grad_norm_nonfinite, cand.grad_norm)):
        if not mask.any():
            continue
        i = int(np.argmax(mask))
        fin = np.flatnonzero(np.isfinite(vals[:i]))
        severity = "critical"
        note = ""
        if name == "grad_norm" and not cand.loss_nonfinite.any() and any(
                r.grad_norm_nonfinite.any() for r in refs):
            # fp16 loss scaling skips overflow steps: the references do it too, loss is fine.
            severity, note = "warning", " (references have non-finite gradient norms too)"
        alarms.append(Alarm(
            "non-finite", severity,
            f"{name} is {_word(vals[i])} at step {int(cand.steps[i])}{note}",
            {"series": name, "first_step": int(cand.steps[i]), "value": _f(vals[i]),
             "count": int(mask.sum()),
             "last_finite_step": int(cand.steps[fin[-1]]) if fin.size else None,
             "last_finite_value": _f(vals[fin[-1]]) if fin.size else None},
            key=f"non-finite:{name}"))
    return alarms


def _word(v: float) -> str:
    return "NaN" if math.isnan(v) else ("+inf" if v > 0 else "-inf")


# --- goal-regression -------------------------------------------------------------------------


def check_goal(refs: list[RunRecords], cand: RunRecords, criteria: Criteria) -> list[Alarm]:
    """Last goal value worse than the reference mean by more than the tolerance (the larger of
    `tolerance` and `rtol`·|mean|) and more than the references' spread (max − min)."""
    g = criteria.goal
    if not g.metric:
        return []
    ref_vals = [v for r in refs if (v := r.last_metric(g.metric)) is not None and math.isfinite(v)]
    c = cand.last_metric(g.metric)
    if not ref_vals or c is None:
        return []
    mean = float(np.mean(ref_vals))
    spread = float(max(ref_vals) - min(ref_vals))
    tol = max(g.tolerance, g.rtol * abs(mean))
    worse = (mean - c) if g.direction == "max" else (c - mean)
    if math.isfinite(c) and not (worse > tol and worse > spread):
        return []
    return [Alarm("goal-regression", "error",
                  f"{g.metric} {c:.6g} vs reference mean {mean:.6g} "
                  f"({'lower' if g.direction == 'max' else 'higher'} is worse)",
                  {"metric": g.metric, "candidate": c, "references": ref_vals, "mean": mean,
                   "spread": spread, "tolerance": tol, "worse_by": worse,
                   "direction": g.direction},
                  key=f"goal-regression:{g.metric}")]


# --- slow ------------------------------------------------------------------------------------


def steady_step_s(r: RunRecords, warmup_steps: int) -> float | None:
    """Median step time after warm-up, leaving out steps that compiled (compile time is reported
    apart); None without any such step. Memoised per run (references are judged repeatedly)."""
    key = ("steady", warmup_steps, r.n)
    if key not in r._cache:
        r._cache[key] = _steady_step_s(r, warmup_steps)
    return r._cache[key]


def _steady_step_s(r: RunRecords, warmup_steps: int) -> float | None:
    # The median of the finite step times at steps >= warm-up, compiled ones left out (all of
    # them where every one compiled). Carried (carry.py): those values kept sorted, a pass
    # sorting only the new ones and merging them in (one copy of the kept ones), the middle
    # read off, where np.median partitions them all again (18 ms at 1M).
    st = carry.folded(r, ("steady", warmup_steps), lambda: (np.zeros(0), np.zeros(0)),
                      lambda st, src, a, b: _steady_rows(st, src, warmup_steps, a, b))
    for s in st:
        if s.size:
            m = s.size
            mid = s[m // 2 - 1: m // 2 + 1] if m % 2 == 0 else s[m // 2: m // 2 + 1]
            if not (mid == 0).any():  # np.median's own pick between -0.0 and 0.0 otherwise
                return float(np.mean(mid))  # as np.median averages the two middle ones
            return _steady_whole(r, warmup_steps)
    return None


def _steady_rows(st: tuple[np.ndarray, np.ndarray], src: RunRecords, warmup_steps: int,
                 a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
    """(not compiled, compiled) finite step times of rows a..b-1 at steps >= warm-up, merged
    into the sorted ones of st (new arrays: a kept state is never changed)."""
    keep = src.steps[a:b] >= warmup_steps
    v, c = src.step_s[a:b][keep], src.compile_s[a:b][keep]
    fin = np.isfinite(v)
    with np.errstate(invalid="ignore"):
        compiled = c > 0
    out = []
    for old, new in zip(st, (v[fin & ~compiled], v[fin & compiled]), strict=True):
        if new.size:
            new = np.sort(new)
            old = np.insert(old, np.searchsorted(old, new), new)
        out.append(old)
    return out[0], out[1]


def _steady_whole(r: RunRecords, warmup_steps: int) -> float | None:
    if r.n and bool(np.all(r.steps[1:] >= r.steps[:-1])):
        start = int(np.searchsorted(r.steps, warmup_steps))
        v, c = r.step_s[start:], r.compile_s[start:]
    else:
        keep = r.steps >= warmup_steps
        v, c = r.step_s[keep], r.compile_s[keep]
    if v.size == 0:
        return None
    compiled = c > 0
    if np.isfinite(v.sum()) and not compiled.any():
        return float(np.median(v))  # fast path: nothing to leave out
    keep = np.isfinite(v)
    if (keep & ~compiled).any():
        keep &= ~compiled
    return float(np.median(v[keep])) if keep.any() else None


def check_slow(refs: list[RunRecords], cand: RunRecords, criteria: Criteria,
               final: bool) -> list[Alarm]:
    limit = criteria.performance.max_step_time_ratio
    if not limit or not refs:
        return []
    w = criteria.compile.warmup_steps
    if not final and int(np.count_nonzero(cand.steps >= w)) < 20:
        return []  # too few steady steps to judge a live run
    c = steady_step_s(cand, w)
    rv = [v for r in refs if (v := steady_step_s(r, w)) is not None]
    if c is None or not rv:
        return []
    return slow_alarm(c, float(np.median(rv)), limit, w)


def slow_alarm(step_s: float, base_s: float, limit: float, warmup_steps: int, *,
               run: str = "candidate", base: str = "reference", key: str = "slow"
               ) -> list[Alarm]:
    """`slow` when a steady step is over `limit` times the one it is held to."""
    if base_s <= 0 or step_s / base_s <= limit:
        return []
    return [Alarm("slow", "warning",
                  f"steady step {step_s * 1e3:.3g} ms vs {base} {base_s * 1e3:.3g} ms "
                  f"({step_s / base_s:.2f}× > {limit:g}×)",
                  {f"{run}_step_s": step_s, f"{base}_step_s": base_s, "ratio": step_s / base_s,
                   "limit": limit, "warmup_steps": warmup_steps}, key=key)]
