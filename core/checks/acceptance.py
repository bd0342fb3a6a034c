"""Statistical acceptance of the goal metric: a stated test over the reference seeds.

The candidate is one more run; under "the port is correct" its goal value comes from the same
distribution as the references' (seeds differ, nothing else). With n references of mean m and
standard deviation s, t = (c − m) / (s·√(1 + 1/n)) follows Student's t with n − 1 degrees of
freedom (the prediction interval of one new run). The test is one-sided on the worse side
(`goal.direction` max or min: a better candidate is no regression) and two-sided for
`direction = "both"`. `goal-regression` is raised when p < `acceptance.alpha` *and* the
candidate is worse by more than the goal tolerance (a change too small to matter is not a
regression, however sure): a correct port is failed with probability at most alpha. That
holds where the references can see a change of the tolerance's size (below); where they
cannot, a p above alpha says little, and the practical rule decides (worse than the
tolerance and than the references' spread), with `too-few-references` saying the rate is
not stated and how many references would state it.

Power: the smallest change these references detect half the time at alpha is the interval's
half-width, t₁₋α·s·√(1 + 1/n); detected 80% of the time: (t₁₋α + t₀.₈)·s·√(1 + 1/n). When that
80% size exceeds the tolerance the criteria care about, `too-few-references` says so in plain
words with what to do: a warning naming how many references would do, or, where no number
would (one candidate run varies more than the tolerance), information (nothing a rerun
changes) asking for a larger tolerance or a more stable metric.
With fewer than two references (no s) or s = 0 the practical rule applies too; the evidence's
`rule` says which decided.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from portside.core.log.criteria import Criteria

from .alarms import Alarm
from .evidence import UNSET, GoalRegression, TooFewReferences
from .goal import goal_values
from .records.comparison import Comparison

POWER = 0.8
MAX_REFERENCES = 64  # suggestions stop here: more seeds than that is not a review step


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((qam + m2) * (a + m2)),
                    -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-14:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) \
        + b * math.log1p(-x)
    front = math.exp(ln)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """Student's t distribution function."""
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


@functools.lru_cache(maxsize=256)  # a few (alpha, df) pairs per session
def t_ppf(q: float, df: float) -> float:
    """Its inverse, by bisection."""
    lo, hi = -1e6, 1e6
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < q:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-10 * max(1.0, abs(mid)):
            break
    return 0.5 * (lo + hi)


def detectable(s: float, n: int, alpha: float, two_sided: bool, power: float = POWER) -> float:
    """The change detected with probability `power` at `alpha` by n references of sd s."""
    df = n - 1
    crit = t_ppf(1 - (alpha / 2 if two_sided else alpha), df)
    return (crit + t_ppf(power, df)) * s * math.sqrt(1 + 1 / n)


def references_needed(s: float, tol: float, alpha: float, two_sided: bool) -> int | None:
    """The fewest references whose test detects a change of `tol` with POWER; None when even
    MAX_REFERENCES do not (the candidate's own run-to-run noise is larger than tol)."""
    for n in range(2, MAX_REFERENCES + 1):
        if detectable(s, n, alpha, two_sided) <= tol:
            return n
    return None


def goal_test(ref_vals: list[float], c: float, direction: str, alpha: float) -> dict[str, Any]:
    """The test's numbers (module doc); `p` None when it cannot be computed."""
    n = len(ref_vals)
    mean = float(np.mean(ref_vals))
    s = float(np.std(ref_vals, ddof=1)) if n >= 2 else 0.0
    two = direction == "both"
    out: dict[str, Any] = {"test": "prediction t-test, one new run against the references"
                                   + (" (two-sided)" if two else " (one-sided, worse side)"),
                           "alpha": alpha, "references": n, "mean": mean, "sd": s,
                           "df": n - 1, "p": None}
    if n < 2 or s <= 0 or not math.isfinite(c):
        return out
    scale = s * math.sqrt(1 + 1 / n)
    t = (c - mean) / scale
    if two:
        p = 2 * (1 - t_cdf(abs(t), n - 1))
    else:  # the probability of a correct run being at least this much worse
        p = t_cdf(t, n - 1) if direction == "max" else 1 - t_cdf(t, n - 1)
    half = t_ppf(1 - (alpha / 2 if two else alpha), n - 1) * scale
    out.update(t=t, p=p, interval=[mean - half, mean + half] if two else
               ([mean - half, None] if direction == "max" else [None, mean + half]),
               detectable_half=half, detectable=detectable(s, n, alpha, two))
    return out


def check_goal_stat(comparison: Comparison, criteria: Criteria) -> list[Alarm]:
    """goal-regression by the test (module doc), and too-few-references when underpowered: at
    the candidate's end, against every reference (a failed one counts)."""
    if not comparison.final:
        return []
    got = goal_values(comparison.references, comparison.cand, criteria)
    if got is None:
        return []
    ref_vals, c = got
    g = criteria.goal
    alpha = criteria.acceptance.alpha
    test = goal_test(ref_vals, c, g.direction, alpha)
    mean, spread = test["mean"], float(max(ref_vals) - min(ref_vals))
    tol = max(g.tolerance, g.rtol * abs(mean))
    worse = {"max": mean - c, "min": c - mean}.get(g.direction, abs(c - mean))
    # The test decides where it can see a change of the tolerance's size; where these
    # references cannot (too few, or too noisy: too-few-references says so) a non-significant
    # p would pass real regressions, so the practical rule stays: worse than the tolerance
    # and than the references' spread.
    powered = test["p"] is not None and (tol <= 0 or test["detectable"] <= tol)
    if powered:
        failed = test["p"] < alpha and worse > tol
    else:
        failed = not math.isfinite(c) or (worse > tol and worse > spread)
    alarms = []
    # `references`: how many (the test's count, where goal.py's practical rule names the values)
    ev = GoalRegression(
        metric=g.metric, candidate=c, references=test["references"], mean=mean, spread=spread,
        tolerance=tol, worse_by=worse, direction=g.direction, test=test["test"],
        alpha=test["alpha"], sd=test["sd"], df=test["df"], p=test["p"],
        t=test.get("t", UNSET), interval=test.get("interval", UNSET),
        detectable_half=test.get("detectable_half", UNSET),
        detectable=test.get("detectable", UNSET),
        rule=(f"t-test at alpha {alpha:g}" if powered else
              "worse than the tolerance and the references' spread (too few references "
              "for the test: its rate is not stated)"))
    if failed:
        p = f", p={test['p']:.3g} < alpha {alpha:g}" if powered else ""
        alarms.append(Alarm(
            "goal-regression", "error",
            f"{g.metric} {c:.6g} vs reference mean {mean:.6g} "
            f"({'lower' if g.direction == 'max' else 'higher'} is worse{p})", ev,
            key=f"goal-regression:{g.metric}"))
    two = g.direction == "both"
    if test["p"] is not None and tol > 0 and test["detectable"] > tol:
        need = references_needed(test["sd"], tol, alpha, two)
        seen = test["detectable"]
        n = len(ref_vals)
        if need:  # more references would do: a warning with the number
            severity = "warning"
            title = (f"{n} references cannot tell a {g.metric} change of {tol:.3g} from seed "
                     f"noise (they see {seen:.3g} or more): run {need} "
                     f"(--reference-runs {need}) or allow a larger [goal] tolerance "
                     f"(≥ {seen:.3g})")
        else:  # no number of references would: said as information, with what would help
            severity = "info"
            title = (f"{g.metric} varies too much from seed to seed (sd {test['sd']:.3g}) to "
                     f"test a change of {tol:.3g}: allow a larger [goal] tolerance "
                     f"(≥ {seen:.3g} with these references) or choose a more stable goal "
                     "metric (e.g. measured on more evaluation data); meanwhile a candidate "
                     "fails when worse than the tolerance and the references' spread")
        alarms.append(Alarm(
            "too-few-references", severity, title,
            TooFewReferences(metric=g.metric, references=n, sd=test["sd"], detectable=seen,
                             tolerance=tol, alpha=alpha, power=POWER, references_needed=need),
            key=f"too-few-references:{g.metric}"))
    return alarms
