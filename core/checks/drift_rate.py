"""The drift envelope calibrated to a false-alarm rate over the whole run (`acceptance.
drift_alpha`): many steps compared are many tests, so the band is set by the distribution of
the largest deviation over the run, not by a per-step quantile.

Model of a correct port: each run's smoothed series is the references' common curve plus a
seed deviation of standard deviation σₜ, Gaussian and correlated over nearby steps.
zₜ = (cₜ − mₜ) / (σ̂ₜ·√(1 + 1/n)) is then unit normal at each step (mₜ the mean of n
references). σ̂ₜ² is the larger of two estimates from the references: their spread at the step
pooled over the `smooth` steps around it (df n − 1 per step), and their step noise (the
envelope's σ) scaled by κ², the ratio of spread² to noise² over the whole run (the seed
differences a trailing mean leaves, with (n − 1)·points/smooth degrees of freedom).

The threshold u solves P(max |zₜ| > u) = α with Rice's formula for the expected number of
crossings of a smooth Gaussian process over T points with lag-1 correlation ρ (both taken
from the references): 2·[Q(u) + (T − 1)·√(2(1 − ρ))/(2π)·e^(−u²/2)], averaged over the
uncertainty of a scale estimated with df degrees of freedom (σ̂²/σ² ~ χ²_df/df), so that a
few references widen the band rather than raise the rate. α is split evenly over the series
judged (Bonferroni), so `numeric-drift` fails a correct port at most α of the time, all
series together. The band never narrows below the fixed envelope's [min, max] widened by
rtol and atol: a change too small to matter is no drift, however sure.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from .acceptance import t_ppf  # Student's t, the goal test's
from .evidence import DriftRate

SCALE_QUANTILES = 32  # points of the χ² mixture over the scale's uncertainty
TESTS = 2  # a series' share of the rate is split between the excursion and the level test


def normal_sf(u: float) -> float:
    return 0.5 * math.erfc(u / math.sqrt(2.0))


def normal_ppf(q: float) -> float:
    lo, hi = -40.0, 40.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if 1.0 - normal_sf(mid) < q:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def chi2_ppf(q: float, df: float) -> float:
    """Wilson–Hilferty: within 1% of the table from 3 degrees of freedom on."""
    k = 2.0 / (9.0 * df)
    return df * max(1.0 - k + normal_ppf(q) * math.sqrt(k), 0.0) ** 3


def max_tail(u: float, points: int, rho: float) -> float:
    """P(max over `points` of |z| > u) for a unit Gaussian series of lag-1 correlation rho
    (Rice: the chance at the first point plus the expected up-crossings after it)."""
    per = math.sqrt(max(2.0 * (1.0 - rho), 0.0)) / (2.0 * math.pi)
    return min(1.0, 2.0 * (normal_sf(u) + max(points - 1, 0) * per * math.exp(-u * u / 2.0)))


@functools.lru_cache(maxsize=256)  # a few reference sets per session
def threshold(alpha: float, points: int, rho: float, df: float) -> float:
    """u with P(max |z| > u) = alpha, z's scale estimated with df degrees of freedom."""
    scales = [math.sqrt(max(chi2_ppf((i + 0.5) / SCALE_QUANTILES, df) / df, 1e-6))
              for i in range(SCALE_QUANTILES)]
    lo, hi = 0.0, 60.0
    for _ in range(60):
        u = 0.5 * (lo + hi)
        if sum(max_tail(u * s, points, rho) for s in scales) / len(scales) > alpha:
            lo = u
        else:
            hi = u
    return hi


def mean_var(points: int, rho: float) -> float:
    """The variance of the mean of `points` consecutive values of a unit AR(1) series of lag-1
    correlation rho."""
    if points <= 1:
        return 1.0
    k = np.arange(1, points)
    return float((1.0 + 2.0 * np.sum((1.0 - k / points) * rho ** k)) / points)


@functools.lru_cache(maxsize=256)
def level_threshold(alpha: float, points: int, rho: float, refs: int) -> tuple[float, float]:
    """(threshold on the mean z over `points` samples, its degrees of freedom): two-sided
    alpha. The scale σ̂ the z are divided by is shared by the points averaged, so its error
    does not average out: t with the df of the references' spread over the span, (refs − 1)
    per independent stretch of the span (the integrated correlation time (1 + ρ)/(1 − ρ))."""
    tau = (1.0 + rho) / max(1.0 - rho, 1e-6)
    nu = max((refs - 1) * points / tau, 1.0)
    return t_ppf(1.0 - alpha / 2.0, nu) * math.sqrt(mean_var(points, rho)), nu


@dataclass(frozen=True)
class Calibration:
    """What the references say about one series: per point of their common prefix the pooled
    spread²; over the run κ², ρ, the points and df, and u."""
    spread2: np.ndarray  # the references' variance, pooled over `smooth` points around
    kappa2: float
    rho: float
    points: int
    df: float
    alpha: float
    u: float

    def sd(self, spread2: np.ndarray, noise2: np.ndarray) -> np.ndarray:
        """σ̂ at points with these pooled spread² and noise²."""
        return np.sqrt(np.maximum(spread2, self.kappa2 * noise2))

    def evidence(self, refs: int, per_series: int) -> DriftRate:
        """The excursion test's rate: `alpha` here is its half of one series' share."""
        total = self.alpha * per_series * TESTS
        return DriftRate(
            rule="max-statistic over the run", alpha=total, alpha_series=self.alpha * TESTS,
            alpha_test=self.alpha, series_judged=per_series, threshold_z=self.u,
            points=self.points, lag1_correlation=self.rho, df=self.df, kappa2=self.kappa2,
            references=refs,
            how=(f"band = reference median ± {self.u:.3g}·σ̂·√(1+1/{refs}): "
                 f"P(max |z| over {self.points} points > {self.u:.3g}) = "
                 f"{self.alpha:.3g} (alpha {total:g} / {per_series} series / {TESTS} "
                 f"tests; Rice, lag-1 correlation {self.rho:.3g}, σ̂ with "
                 f"{self.df:.3g} df)"))

    def level_evidence(self, refs: int, per_series: int, points: int, threshold: float,
                       nu: float) -> DriftRate:
        total = self.alpha * per_series * TESTS
        return DriftRate(
            rule="level over the second half", alpha=total, alpha_series=self.alpha * TESTS,
            alpha_test=self.alpha, series_judged=per_series, threshold_z=threshold,
            points=points, lag1_correlation=self.rho, df=nu, references=refs,
            how=(f"|mean z| over the second half's {points} points > {threshold:.3g}: "
                 f"P = {self.alpha:.3g} (alpha {total:g} / {per_series} series / "
                 f"{TESTS} tests; t with {nu:.3g} df × the sd of a mean of {points} "
                 f"points of lag-1 correlation {self.rho:.3g})"))


def pooled(x: np.ndarray, width: int) -> np.ndarray:
    """Centred mean over `width` points (fewer at the ends), NaN-skipping."""
    width = min(width, x.size)  # np.convolve's "same" is as long as the longer input
    if width <= 1:
        return x.copy()
    fin = np.isfinite(x)
    k = np.ones(width)
    num = np.convolve(np.where(fin, x, 0.0), k, mode="same")
    den = np.convolve(fin.astype(np.float64), k, mode="same")
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.maximum(den, 1), np.nan)


def calibrate(smoothed: np.ndarray, noise: np.ndarray, smooth: int, gap: int,
              alpha: float) -> Calibration | None:
    """From the references' smoothed series (rows, aligned) and their mean step noise σ over
    the smoothing; None with fewer than two references or nothing finite."""
    n = smoothed.shape[0]
    if n < 2 or smoothed.shape[1] < 2:
        return None
    with np.errstate(invalid="ignore"):  # NaN where a reference lacks the point: left out
        mean = smoothed.mean(axis=0)
        var = np.var(smoothed, axis=0, ddof=1)
    fin = np.isfinite(var)
    if not fin.any():
        return None
    noise2 = noise * noise
    ok = fin & (noise2 > 0)
    kappa2 = float(np.mean(var[ok] / noise2[ok])) if ok.any() else 0.0
    dev = smoothed[:, fin] - mean[fin]
    den = float(np.sum(dev * dev))
    rho = float(np.sum(dev[:, 1:] * dev[:, :-1]) / den) if den > 0 else 1.0
    rho = min(max(rho, 0.0), 1.0)
    points = max(int(fin.sum()) // max(gap, 1), 2)
    df = max((n - 1) * points / max(smooth, 1), 1.0)
    # σ̂² at a point: the larger of the spread pooled over `smooth` points and the step noise
    # times the spread-to-noise ratio pooled over a wider stretch (an eighth of the run, four
    # smoothings at least): early in training the seeds part far more than the run-wide
    # ratio says (issue 37). A point's scale is then known to the df of that stretch, not of
    # the whole run, and the threshold's mixture over the scale's error has those df.
    spread2 = pooled(var, smooth * max(gap, 1))
    wide = max(4 * smooth, points // 8) * max(gap, 1)
    ratio = np.where(ok, var / np.where(ok, noise2, 1.0), np.nan)
    spread2 = np.fmax(spread2, pooled(ratio, wide) * noise2)
    df = min(df, max((n - 1) * wide / max(smooth * max(gap, 1), 1), 1.0))
    u = threshold(round(alpha, 12), points, round(rho, 3), round(df, 1))
    return Calibration(spread2, kappa2, rho, points, df, alpha, u)
