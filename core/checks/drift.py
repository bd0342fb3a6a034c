"""numeric-drift: the candidate's loss and grad-norm series against the references' envelope
(the fixed one, or the band calibrated to `acceptance.drift_alpha`: drift_rate.py), aligned by
step or by training progress; memoised per run so live passes stay cheap."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from portside.core.log.criteria import Criteria

from . import drift_rate
from .alarms import Alarm
from .evidence import DriftRate, NumericDrift, Spark
from .records import carry
from .records.comparison import Comparison
from .records.facts import steps_per_epoch
from .records.memo import FoldKey, same_runs
from .records.records import RunRecords
from .records.series import (
    common_steps,
    downsample,
    rolling_mean,
    rolling_median,
    smoothed,
    smoothed_median,
    step_noise,
    true_runs,
)


def _smooth(r: RunRecords, name: str, w: int, median: bool = False,
            log: bool = False) -> np.ndarray:
    """A reference's smoothed series (trailing mean, or median for the calibrated band, then
    in logs where the series is positive), memoised (references are judged on every live
    pass)."""
    key = (name, w) if not median else (name, w, "median", log)
    val = r.derived.smooth.get(key)
    if val is None:
        val = (rolling_median if median else rolling_mean)(r.series(name), w)
        if log:  # the median of the logs is the log of the median
            with np.errstate(divide="ignore", invalid="ignore"):
                val = np.log(val)
        r.derived.smooth[key] = val
    return val


def _noise(r: RunRecords, name: str, w: int, gap: int, log: bool = False) -> np.ndarray:
    key = (name, w, gap) if not log else (name, w, gap, "log")
    val = r.derived.noise.get(key)
    if val is None:
        x = r.series(name)
        if log:
            with np.errstate(divide="ignore", invalid="ignore"):
                x = np.log(x)
        val = r.derived.noise[key] = _sparse_noise(x, w, gap)
    return val


def _positive(runs: list[RunRecords], name: str) -> bool:
    """Every finite value of the series in every run > 0 (losses and gradient norms usually
    are, and their noise is a factor, not a term: they are judged in logs then). A live
    run's least value is carried from pass to pass."""
    for r in runs:
        x = r.series(name)
        live = r.derived.live
        if live is None:
            least = r.derived.least.get(name, math.nan)
            if math.isnan(least):
                least = r.derived.least[name] = _least(x)
        else:
            st = live.roll.get(("min", name))
            if st is None or st["n"] > x.size:
                st = {"n": 0, "min": math.inf}
            st = {"n": x.size, "min": min(st["min"], _least(x[st["n"]:]))}
            live.roll["min", name] = st
            least = st["min"]
        if not least > 0:
            return False
    return True


def _least(x: np.ndarray) -> float:
    fin = x[np.isfinite(x)]
    return float(fin.min()) if fin.size else math.inf


def _envelope(refs: list[RunRecords], sel: list[slice | np.ndarray], name: str, smooth: int,
              noise_w: int, gap: int = 1, median: bool = False,
              log: bool = False) -> tuple[np.ndarray, ...] | None:
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
        sm = _smooth(r, name, smooth, median, log)[s]
        rows[i] = sm
        np.fmin(lo, sm, out=lo)  # fmin/fmax skip NaN (a reference missing a step)
        np.fmax(hi, sm, out=hi)
        if noise_w:
            sigma += _noise(r, name, noise_w, gap, log)[s]
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
    sm = dc.smooth
    key = (how.name, sm, how.gap, how.noise_w, alpha, len(refs), how.median, how.log)
    got = refs[0].derived.drift_cal.get(key)
    if got is not None and same_runs(got[0], refs):
        kept: drift_rate.Calibration | None = got[1]  # the memo holds it untyped (memo.py)
        return kept
    g = how.gap
    _, sel = common_steps(refs)
    env = _envelope(refs, sel, how.name, sm * g, how.noise_w, g, how.median, how.log)
    cal = None
    if env is not None:
        rows = np.stack([_smooth(r, how.name, sm * g, how.median, how.log)[s]
                         for r, s in zip(refs, sel, strict=True)])
        n_at = np.arange(1, rows.shape[1] + 1)
        noise = env[2] / np.sqrt(np.clip(n_at / g, 1, sm))
        cal = drift_rate.calibrate(rows, noise, sm, g, alpha)
    refs[0].derived.drift_cal[key] = (list(refs), cal)
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
        st = carry.folded(r, FoldKey("gap", name), lambda: {"last": -1, "fin": 0, "diffs": {}},
                          lambda st, src, a, b: _gap_rows(st, src.series(name), a, b))
        if st["fin"] == r.n:  # a value at every step: the gap is 1 without the median
            return 1
        if st["diffs"] is carry.OFF:  # many distinct spacings: the median of them all
            at = np.flatnonzero(np.isfinite(r.series(name)))
            return int(np.median(np.diff(at))) if at.size >= 2 else 1
        return int(carry.hist_median(st["diffs"])) if st["fin"] >= 2 else 1

    # memoised: references are asked on every live pass; a live run's spacings are carried
    got = r.derived.gap.get(name)
    if got is None:
        got = r.derived.gap[name] = make()
    return max(int(got), 1)


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
    """`judge` of these runs alone, the candidate complete, the criteria as given (tests,
    benchmarks: a pass builds its Comparison once and calls `drift`)."""
    return judge(Comparison(refs, cand, final=True), criteria)


def drift(c: Comparison, criteria: Criteria) -> list[Alarm]:
    """The drift check of a pass: `judge` with the series of `drift_criteria`."""
    return judge(c, drift_criteria(c, criteria))


def drift_criteria(c: Comparison, criteria: Criteria) -> Criteria:
    """The drift criteria without `grad_norm` when the global batch differs: its noise part
    scales with 1/√batch by construction (checks/batch.py)."""
    series = criteria.drift.series
    if "grad_norm" not in series or c.batch is None:
        return criteria
    kept = tuple(s for s in series if s != "grad_norm")
    return replace(criteria, drift=replace(criteria.drift, series=kept))


def judge(c: Comparison, criteria: Criteria) -> list[Alarm]:
    """Smoothed candidate series against the references. With `acceptance.drift_alpha` and
    two references or more (drift_rate.py), two tests a series, each given half its share of
    the rate: the excursion test (trailing medians outside the band around the references'
    mean calibrated to that rate over the whole run, at least [min, max] widened by
    rtol·max(|lo|, |hi|) + atol: one sample outside is the alarm, judged live) and the level
    test (the candidate's mean deviation over the second half of the compared steps, judged
    once the run is complete). Else the fixed envelope, for `window` consecutive common
    steps: [min, max] over references of the same smoothing, widened by rtol·max(|lo|, |hi|)
    + atol + noise_z·σ, where σ is the references' step noise divided by √(points in the
    smoothing window)."""
    refs, cand = c.refs, c.cand
    if not refs or cand.n == 0:
        return []
    dc = criteria.drift
    al = c.alignment
    steps, idx = al.steps, al.sel
    if steps.size < dc.window:
        return []
    noise_w = max(4 * dc.smooth, 20)
    # drift_rate.py: the rate split over the series judged, then over the two tests; two
    # references at least
    alpha = criteria.acceptance.drift_alpha / len(dc.series) if len(refs) >= 2 else 0.0
    c_smooth = _progress_smooth(cand, refs, dc.smooth) if al.mode == "progress" else dc.smooth
    live = cand.derived.live
    memo = live.drift if live is not None else {}  # not a live snapshot: nothing is carried
    # The level test needs the whole run (the final pass), and runs of the same configuration:
    # aligned by training progress (another global batch, its lr scaled by a rule that only
    # approximates) the candidate's loss is not meant to sit where the references' does.
    complete = c.final and al.mode == "step"
    k = steps.size
    # A live run judged by step (every selector the prefix 0..k-1): each point's verdict is
    # fixed once its step is in every run, so a pass need only look at the new points and the
    # `window` before them for a long excursion; the full evidence is built when there is one.
    tail = live is not None and al.mode == "step" and all(
        isinstance(s, slice) and s.start in (0, None) for s in idx)
    alarms = []
    for name in dc.series:
        # A thinned series is smoothed over `smooth` of its values, not steps, and must stay
        # out for a few of its values: the same test, counted in samples.
        gap = sample_gap([cand, *refs], name)
        window = dc.window if gap == 1 else max(dc.window, 2 * gap)
        how = _How(name, c_smooth, gap, window, noise_w)
        # The calibrated band's series are trailing medians: a gradient norm's spikes lift a
        # mean for `smooth` steps, far out of a Gaussian model's tail (issue 37).
        band = replace(how, window=gap, alpha=alpha / 2, median=True,
                       log=_positive([cand, *refs], name))
        calibrated = bool(alpha) and _calibration(refs, dc, band, band.alpha) is not None
        found = _excursion(refs, cand, dc, band if calibrated else how, al, memo, tail, k)
        if found is None and calibrated and complete:
            found = _level_alarm(refs, cand, dc, band, al)
        if found is not None:
            alarms.append(found)
    return alarms


def _excursion(refs: list[RunRecords], cand: RunRecords, dc: Any, how: _How, al: Any,
               memo: dict[Any, Any], tail: bool, k: int) -> Alarm | None:
    """The band's alarm of one series, carried over live passes (see `tail` in drift)."""
    key = (dc.rtol, dc.atol, dc.smooth, dc.noise_z, how)
    seen = memo.get(key) if tail else None
    if seen is not None and same_runs(seen[1], refs) and seen[0] <= k:
        a = max(0, seen[0] - how.window)
        if not _long_excursion(refs, cand, dc, how, a, k):
            memo[key] = (k, seen[1])
            return None
    found = _drift_alarm(refs, cand, dc, how, al)
    if found is None and tail:
        memo[key] = (k, list(refs))
    return found


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
    median: bool = False  # trailing medians, not means (the calibrated band's)
    log: bool = False  # judged in logs (the band's, where the series is positive)


def _excess(refs: list[RunRecords], cand: RunRecords, dc: Any, how: _How,
            sel_c: slice | np.ndarray, sel_r: list[slice | np.ndarray], n_at: np.ndarray,
            ) -> tuple[Any, ...] | None:
    """Smoothed candidate, widened envelope (lo, hi), raw hi and the excess over it at the
    selected points; n_at: each point's position in the compared series (from 1). With
    `how.alpha` (drift_rate.py) the envelope is also at least the calibrated band; its
    Calibration comes last (None: the fixed envelope alone). None when one side does not
    report the series."""
    g, sm = how.gap, dc.smooth
    cal = _calibration(refs, dc, how, how.alpha) if how.alpha else None
    noise_w = how.noise_w if (dc.noise_z or cal is not None) else 0
    c_s = (smoothed_median if how.median else smoothed)(
        cand, how.name, how.c_smooth * g)[sel_c]
    if how.log:
        with np.errstate(divide="ignore", invalid="ignore"):
            c_s = np.log(c_s)
    env = _envelope(refs, sel_r, how.name, sm * g, noise_w, g, how.median, how.log)
    if env is None or not np.isfinite(c_s).any():
        return None
    lo, hi, sigma, mean, var = env
    # rtol is relative: in logs it is a constant width
    widen = (math.log1p(dc.rtol) + dc.atol if how.log
             else dc.rtol * np.maximum(np.abs(lo), np.abs(hi)) + dc.atol)
    n_eff = np.clip(n_at / g, 1, sm)
    if cal is None and dc.noise_z:
        widen = widen + dc.noise_z * sigma / np.sqrt(n_eff)
    elo, ehi = lo - widen, hi + widen
    if cal is not None:
        # The references' pooled spread: their own (the same for every pass) where the
        # selection is a prefix of their steps, else pooled over the selected points.
        spread2 = (cal.spread2[sel_r[0]] if all(isinstance(s, slice) for s in sel_r)
                   else drift_rate.pooled(var, sm * g))
        half = cal.u * cal.sd(spread2, (sigma / np.sqrt(n_eff)) ** 2) \
            * math.sqrt(1 + 1 / len(refs))
        np.fmin(elo, mean - half, out=elo)
        np.fmax(ehi, mean + half, out=ehi)
    with np.errstate(invalid="ignore"):
        z = (c_s - mean) / (half / cal.u) if cal is not None else np.full(c_s.size, np.nan)
        if how.log:  # judged in logs, shown in the series' own units (exp keeps the order)
            c_s, elo, ehi, hi = np.exp(c_s), np.exp(elo), np.exp(ehi), np.exp(hi)
        excess = np.maximum(c_s - ehi, elo - c_s)  # > 0 outside; NaN where unknown
    return c_s, elo, ehi, hi, excess, cal, z


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


def _level_alarm(refs: list[RunRecords], cand: RunRecords, dc: Any, how: _How,
                 al: Any) -> Alarm | None:
    """The level test: the candidate's mean z over the second half of the compared steps (z
    as the band's: its deviation from the references' median over σ̂·√(1 + 1/n)). A correct
    port that starts slower and catches up passes it; a changed one (label noise, momentum)
    sits off the references there for good, a little everywhere, which no single point
    shows."""
    steps, idx = al.steps, al.sel
    got = _excess(refs, cand, dc, how, idx[0], idx[1:], np.arange(1, steps.size + 1))
    if got is None or got[5] is None:
        return None
    c_s, elo, ehi, hi, _, cal, z = got
    a = steps.size // 2
    fin = np.isfinite(z[a:])
    m = int(fin.sum()) // max(how.gap, 1)  # samples, as the band counts a thinned series
    if m < 2:
        return None
    level = float(np.mean(z[a:][fin]))
    thr, nu = drift_rate.level_threshold(round(how.alpha, 12), m, round(cal.rho, 3), len(refs))
    if abs(level) <= thr:
        return None
    name, gap = how.name, how.gap
    direction = "above" if level > 0 else "below"
    span = np.arange(a, steps.size)
    worst = int(span[np.nanargmax(np.where(fin, np.abs(z[a:]), -np.inf))])
    out = int(np.sum((c_s[a:] > ehi[a:]) | (c_s[a:] < elo[a:])))
    return Alarm(
        "numeric-drift", "error",
        f"{name} sits {direction} the references over the second half, from step "
        f"{int(steps[a])} (mean z {level:+.2f}, beyond ±{thr:.2f})",
        NumericDrift(
            series=name, test="level", mean_z=level, threshold=thr,
            first_step=int(steps[a]), alarm_step=int(steps[-1]),
            worst_step=int(steps[worst]), direction=direction,
            steps_out=out, window=int(steps.size - a), smooth=dc.smooth * gap,
            sample_gap=gap,
            value_first=float(c_s[a]), envelope_first=[float(elo[a]), float(ehi[a])],
            value_worst=float(c_s[worst]),
            envelope_worst=[float(elo[worst]), float(ehi[worst])],
            reference_runs=len(refs), aligned_by=al.mode,
            rate=cal.level_evidence(len(refs), len(dc.series), m, thr, nu),
            spark=Spark(steps=downsample(steps), candidate=downsample(c_s),
                        lo=downsample(elo), hi=downsample(ehi)),
        ),
        key=f"numeric-drift:{name}")


def _drift_alarm(refs: list[RunRecords], cand: RunRecords, dc: Any, how: _How,
                 al: Any) -> Alarm | None:
    """The drift alarm of one series over the whole aligned series, or None."""
    steps, idx = al.steps, al.sel
    name, window, gap = how.name, how.window, how.gap
    got = _excess(refs, cand, dc, how, idx[0], idx[1:], np.arange(1, steps.size + 1))
    if got is None:
        return None  # the series is not reported by one side
    c_s, elo, ehi, hi, excess, cal, _ = got
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
        NumericDrift(
            series=name, first_step=int(steps[first]),
            alarm_step=int(steps[first + window - 1]),
            worst_step=int(steps[worst]), direction=direction,
            steps_out=int(in_long.sum()), window=window,
            smooth=dc.smooth * gap,
            sample_gap=gap,
            value_first=float(c_s[first]), envelope_first=[float(elo[first]), float(ehi[first])],
            value_worst=float(c_s[worst]), envelope_worst=[float(elo[worst]), float(ehi[worst])],
            reference_runs=len(refs), aligned_by=al.mode,
            rate=(cal.evidence(len(refs), len(dc.series)) if cal is not None else
                  DriftRate(rule="fixed envelope (rtol, atol, noise_z, window): no rate stated",
                            alpha=None)),
            spark=Spark(steps=downsample(steps), candidate=downsample(c_s),
                        lo=downsample(elo), hi=downsample(ehi)),
        ),
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
