"""slow: the candidate's steady step time (after warm-up) against the references', and the one
alarm both the candidate and the larger-inputs run use."""

from __future__ import annotations

from typing import Literal

import numpy as np

from portside.core.log.criteria import Criteria

from .alarms import Alarm
from .evidence import UNSET, Slow
from .records import carry
from .records.comparison import Comparison
from .records.memo import FoldKey
from .records.records import RunRecords


def steady_step_s(r: RunRecords, warmup_steps: int) -> float | None:
    """Median step time after warm-up, leaving out steps that compiled (compile time is reported
    apart); None without any such step. Memoised per run (references are judged repeatedly)."""
    key = (warmup_steps, r.n)
    if key not in r.derived.steady:
        r.derived.steady[key] = _steady_step_s(r, warmup_steps)
    return r.derived.steady[key]


def _steady_step_s(r: RunRecords, warmup_steps: int) -> float | None:
    # The median of the finite step times at steps >= warm-up, compiled ones left out (all of
    # them where every one compiled). Carried (carry.py): those values kept sorted, a pass
    # sorting only the new ones and merging them in (one copy of the kept ones), the middle
    # read off, where np.median partitions them all again (18 ms at 1M).
    st = carry.folded(r, FoldKey("steady", warmup_steps), lambda: (np.zeros(0), np.zeros(0)),
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


def check_slow(c: Comparison, criteria: Criteria) -> list[Alarm]:
    refs, cand, final = c.refs, c.cand, c.final
    limit = criteria.performance.max_step_time_ratio
    if not limit or not refs:
        return []
    w = criteria.compile.warmup_steps
    if not final and int(np.count_nonzero(cand.steps >= w)) < 20:
        return []  # too few steady steps to judge a live run
    got = steady_step_s(cand, w)
    rv = [v for r in refs if (v := steady_step_s(r, w)) is not None]
    if got is None or not rv:
        return []
    return slow_alarm(got, float(np.median(rv)), limit, w)


def slow_alarm(step_s: float, base_s: float, limit: float, warmup_steps: int, *,
               run: Literal["candidate", "larger"] = "candidate",
               base: Literal["reference", "candidate"] = "reference", key: str = "slow"
               ) -> list[Alarm]:
    """`slow` when a steady step is over `limit` times the one it is held to (the evidence
    names both by `run` and `base`: candidate_step_s, reference_step_s…)."""
    if base_s <= 0 or step_s / base_s <= limit:
        return []
    times = {run: step_s, base: base_s}  # the run's and the base's step, by their names
    return [Alarm("slow", "warning",
                  f"steady step {step_s * 1e3:.3g} ms vs {base} {base_s * 1e3:.3g} ms "
                  f"({step_s / base_s:.2f}× > {limit:g}×)",
                  Slow(larger_step_s=times.get("larger", UNSET),
                       candidate_step_s=times.get("candidate", UNSET),
                       reference_step_s=times.get("reference", UNSET), ratio=step_s / base_s,
                       limit=limit, warmup_steps=warmup_steps), key=key)]
