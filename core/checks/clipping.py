"""clipping-changed: the clip *configuration* differs from the reference's.

Only causes a reviewer can find in the diff raise it: max_norm, the norm type, clipping present
or absent, by value instead of by norm, how many times per step (per micro-batch instead of
once), and clipping the per-rank gradients before they are reduced across ranks. How often
clipping is active (the clipped share of steps) follows from the gradients: with the same
configuration a different share is evidence on the drift alarm (`clip_share`), never an alarm
of its own — e.g. weight decay added changes the gradients, not the clipping code.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..criteria import Criteria
from .alarms import Alarm
from .ranks import diverged
from .records import RunRecords
from .steps import increasing, index_of, intersect

CLIP_SHARE_PP = 0.25  # clipped share differing by more than 25 points…
CLIP_SHARE_RATIO = 3.0  # …or by more than 3x (and by at least 5 points)
CLIP_SHARE_MIN_PP = 0.05
CLIP_MIN_STEPS = 20  # clipped-share comparisons need this many clipped-or-not steps
RANK_SPREAD = 1e-4  # per-rank clip norms differing by more than this (relative) are local
RANK_SAME = 1e-6  # …where the reference's agree to within this


def clip_stats(r: RunRecords) -> dict[str, Any]:
    """Memoised per run (references are judged on every live call)."""
    val = r._cache.get(("clip_stats",))
    if val is None:
        val = r._cache[("clip_stats",)] = _clip_stats(r)
    return val


def _clip_stats(r: RunRecords) -> dict[str, Any]:
    mn, gn = r.max_norm, r.grad_norm
    if np.isfinite(mn.sum()) and np.isfinite(gn.sum()):  # fast path: every step clipped and judged
        n_used = judged = r.n
        clipped = int(np.count_nonzero(gn > mn))
        mv = mn
    else:
        used = np.isfinite(mn)
        n_used = int(used.sum())
        mv = mn[used]
        with np.errstate(invalid="ignore"):
            j = used & np.isfinite(gn)
            clipped = int(np.count_nonzero(j & (gn > mn)))
        judged = int(j.sum())
    if n_used and mv.min() == mv.max():
        values = mv[:1]  # the usual constant max_norm: skip the sort
    else:
        values = np.unique(np.round(mv, 9)) if n_used else np.zeros(0)
    return {"steps": r.n, "clip_steps": n_used,
            "max_norm": values[:8].tolist(), "uses_share": n_used / r.n if r.n else 0.0,
            "clipped_share": clipped / judged if judged else None, "judged": judged}


def clip_config(r: RunRecords) -> dict[str, Any]:
    """What the code asked for, per run: the things clipping-changed compares (memoised)."""
    val = r._cache.get(("clip_config",))
    if val is None:
        val = r._cache[("clip_config",)] = _clip_config(r)
    return val


def _clip_config(r: RunRecords) -> dict[str, Any]:
    st = clip_stats(r)
    used = np.isfinite(r.max_norm)
    nt = r.col("norm_type")[used]
    nt = np.where(np.isfinite(nt) | np.isinf(nt), nt, 2.0)  # absent: the default 2-norm
    cv = r.col("clip_value")
    cv = cv[np.isfinite(cv)]
    calls = r.col("clip_calls")
    calls = calls[used & np.isfinite(calls)]
    red = r.col("clip_reduced")
    red = red[np.isfinite(red)]
    return {**st,
            "norm_type": np.unique(nt)[:4].tolist(),
            "clip_value": np.unique(np.round(cv, 9))[:4].tolist(),
            "value_steps": int(cv.size),
            "clip_calls": float(np.median(calls)) if calls.size else None,
            "world_size": r.world_size,
            "before_reduction": (float(np.mean(red == 0)) if red.size else None)}


def _with_spread(cfg: dict[str, Any], r: RunRecords) -> dict[str, Any]:
    """`cfg` with its `rank_spread` (O(steps × ranks): computed only when asked, last key)."""
    if "rank_spread" not in cfg:
        cfg["rank_spread"] = rank_norm_spread(r)
    return cfg


def rank_norm_spread(r: RunRecords) -> float | None:
    """Median over clipped steps common to all ranks of (max − min)/max of their clip norms:
    0 when every rank clipped the same (reduced) gradients; None with fewer than 2 ranks."""
    if len(r.ranks) < 2:
        return None
    runs = list(r.ranks.values())
    memo = r._cache.get(("live",))
    if memo is not None:
        carried = _carried_spread(memo, r)
        if carried is not _UNKNOWN:
            return carried  # type: ignore[return-value]
    m = min(x.n for x in runs)
    first = runs[0].steps[:m]
    if all(x.steps_increasing() and np.array_equal(x.steps[:m], first) for x in runs):
        # The usual case, every rank stepped the same steps (some are ahead, live): the
        # common ones are the first m, where every rank's clip is known.
        both = np.ones(m, bool)
        for x in runs:
            both &= np.isfinite(x.max_norm[:m]) & np.isfinite(x.grad_norm[:m])
        if not both.any():
            return None
        a = np.vstack([x.grad_norm[:m][both] for x in runs])
        top = np.maximum(np.abs(a).max(axis=0), 1e-30)
        return float(np.median((a.max(axis=0) - a.min(axis=0)) / top))
    common = None
    for x in runs:
        s = x.steps[np.isfinite(x.max_norm) & np.isfinite(x.grad_norm)]
        inc = x.steps_increasing()
        common = s if common is None else intersect(common, s, inc, inc)
    if common is None or common.size == 0:
        return None
    norms = []
    for x in runs:
        norms.append(x.grad_norm[index_of(common, x.steps, x.steps_increasing())])
    a = np.vstack(norms)
    top = np.maximum(np.abs(a).max(axis=0), 1e-30)
    return float(np.median((a.max(axis=0) - a.min(axis=0)) / top))


_UNKNOWN = object()


def _carried_spread(memo: dict[Any, Any], r: RunRecords) -> object:
    """rank_norm_spread on a live run's snapshot: the per-step spreads of earlier passes are
    kept (rows are only appended), only new rows are added; _UNKNOWN when the ranks' steps
    are not one increasing sequence (the general path then)."""
    key = ("rank_spread", tuple(r.ranks))
    st = memo.get(key) or {"m": 0, "vals": np.zeros(0), "seen": {}}
    if st.get("off"):
        return _UNKNOWN
    runs = list(r.ranks.values())
    m0, m = st["m"], min(x.n for x in runs)
    if m < m0:
        return _UNKNOWN
    # Every rank's whole series increasing (rows past m too: a repeated step there would make
    # the general path take another row), and all the same on the first m rows.
    seen = st["seen"]
    for k, x in r.ranks.items():
        if not increasing(x.steps[max(seen.get(k, 0) - 1, 0):]):
            memo[key] = {"off": True}
            return _UNKNOWN
        seen[k] = x.n
    first = runs[0].steps[m0:m]
    if not all(np.array_equal(x.steps[m0:m], first) for x in runs):
        memo[key] = {"off": True}
        return _UNKNOWN
    both = np.ones(m - m0, bool)
    for x in runs:
        both &= np.isfinite(x.max_norm[m0:m]) & np.isfinite(x.grad_norm[m0:m])
    if both.any():
        a = np.vstack([x.grad_norm[m0:m][both] for x in runs])
        top = np.maximum(np.abs(a).max(axis=0), 1e-30)
        st["vals"] = np.concatenate((st["vals"], (a.max(axis=0) - a.min(axis=0)) / top))
    st["m"] = m
    memo[key] = st
    return float(np.median(st["vals"])) if st["vals"].size else None


def _same_values(a: list[float], b: list[float]) -> bool:
    return all(any(x == y or (np.isfinite(x - y) and abs(x - y) <= 1e-6 * max(abs(x), abs(y)))
                   for y in b) for x in a)


def _fmt(vals: list[float]) -> str:
    return "/".join(f"{v:g}" for v in vals) or "none"


def check_clipping(refs: list[RunRecords], cand: RunRecords, criteria: Criteria,
                   final: bool) -> list[Alarm]:
    """The clip configuration differs from every reference's. References are cut to the
    candidate's steps so a live run compares like with like."""
    if not refs or cand.n == 0:
        return []
    last = int(cand.steps.max())
    cuts = [r.upto(last) for r in refs]
    rs = [clip_config(r) for r in cuts]
    cs = clip_config(cand)
    min_steps = 1 if final else max(criteria.drift.window, 5)
    ev: dict[str, Any] = {"candidate": cs, "references": rs}
    ref_vals = sorted({v for s in rs for v in s["max_norm"]})
    ref_all_clip = all(s["clip_steps"] > 0 for s in rs)
    ref_none_clip = all(s["clip_steps"] == 0 for s in rs)

    def alarm(reason: str, title: str, severity: str = "error") -> list[Alarm]:
        _with_spread(cs, cand)
        for s, r in zip(rs, cuts, strict=True):
            _with_spread(s, r)
        return [Alarm("clipping-changed", severity, title, {**ev, "reason": reason},
                      key="clipping-changed")]

    if cs["clip_steps"] and ref_vals and not _same_values(cs["max_norm"], ref_vals):
        return alarm("max_norm", f"max_norm changed: {_fmt(cs['max_norm'])} vs reference "
                     f"{_fmt(ref_vals)}")
    ref_nt = sorted({v for s in rs if s["clip_steps"] for v in s["norm_type"]})
    if cs["clip_steps"] and ref_nt and not _same_values(cs["norm_type"], ref_nt):
        return alarm("norm_type", f"clip norm type changed: {_fmt(cs['norm_type'])} vs "
                     f"reference {_fmt(ref_nt)}")
    ref_cv = sorted({v for s in rs for v in s["clip_value"]})
    if cs["clip_value"] and ref_cv and not _same_values(cs["clip_value"], ref_cv):
        return alarm("clip_value", f"clip_value changed: {_fmt(cs['clip_value'])} vs "
                     f"reference {_fmt(ref_cv)}")
    if cand.n < min_steps:
        return []
    ref_all_value = all(s["value_steps"] > 0 for s in rs)
    if ref_all_value and not cs["value_steps"]:
        how = " (clips by norm instead)" if cs["clip_steps"] else ""
        return alarm("value-removed", f"clipping by value removed (reference clip_value "
                     f"{_fmt(ref_cv)}){how}")
    if all(s["value_steps"] == 0 for s in rs) and cs["value_steps"]:
        return alarm("value-added", f"clipping by value added (clip_value "
                     f"{_fmt(cs['clip_value'])})")
    if ref_all_clip and cs["clip_steps"] == 0:
        return alarm("stopped", f"clipping removed (reference clips at max_norm {_fmt(ref_vals)})")
    if ref_none_clip and cs["clip_steps"]:
        active = (cs["clipped_share"] or 0.0) > 0
        return alarm("started", f"clipping added at max_norm {_fmt(cs['max_norm'])}"
                     + ("" if active else " (never active so far)"),
                     "error" if active else "warning")
    ref_calls = {s["clip_calls"] for s in rs if s["clip_calls"] is not None}
    if cs["clip_calls"] is not None and ref_calls and cs["clip_calls"] not in ref_calls:
        return alarm("calls-per-step", f"clips {cs['clip_calls']:g} time(s) per step vs "
                     f"reference {_fmt(sorted(ref_calls))} (e.g. per micro-batch)")
    waiting = not final and len(cand.ranks) < cand.world_size  # live: ranks still to come
    if (cs["clip_steps"] or cs["value_steps"]) and not waiting:
        local = _before_reduction(cs, rs, diverged(cand), cand, cuts)
        if local:
            return alarm("before-reduction", local)
    return []


def _before_reduction(cs: dict[str, Any], rs: list[dict[str, Any]], cand_diverged: bool,
                      cand: RunRecords, cuts: list[RunRecords]) -> str:
    """Why the candidate clips per-rank gradients before they are reduced, or ''."""
    if cs["world_size"] < 2 or cand_diverged:
        return ""  # ranks that never reduce at all: ranks-diverged names that cause
    ref_after = all(s["world_size"] < 2 or (s["before_reduction"] or 0.0) < 0.5 for s in rs)
    _with_spread(cs, cand)
    if ref_after and (cs["before_reduction"] or 0.0) >= 0.5:
        spread = cs["rank_spread"]
        tail = f"; per-rank clip norms differ by {spread:.2g} (relative)" if spread else ""
        return ("clipping runs on each rank's own gradients before they are reduced "
                f"(reference clips after the reduction){tail}")
    spread = cs["rank_spread"]
    if spread is None or spread <= RANK_SPREAD:
        return ""
    ref_same = all((_with_spread(s, r)["rank_spread"] or 0.0) <= RANK_SAME
                   for s, r in zip(rs, cuts, strict=True))
    if ref_same:
        return (f"per-rank clip norms differ by {spread:.2g} (relative) while the reference's "
                "are identical: clipping runs before the gradients are reduced")
    return ""


def clip_share(refs: list[RunRecords], cand: RunRecords) -> dict[str, Any] | None:
    """The clipped share of steps, candidate vs references, when the configuration is the same
    (same max_norm); `differs` when the share moved more than the thresholds. Evidence for the
    drift alarm: the gradients changed."""
    if not refs or cand.n == 0:
        return None
    last = int(cand.steps.max())
    rs = [clip_stats(r.upto(last)) for r in refs]
    cs = clip_stats(cand)
    ref_shares = [s["clipped_share"] for s in rs if s["clipped_share"] is not None and
                  s["judged"] >= CLIP_MIN_STEPS]
    if cs["clipped_share"] is None or cs["judged"] < CLIP_MIN_STEPS or not ref_shares:
        return None
    c, r = cs["clipped_share"], float(np.mean(ref_shares))
    d = abs(c - r)
    ratio = max(c, r) / max(min(c, r), 1e-12)
    return {"candidate": c, "reference": r, "max_norm": cs["max_norm"],
            "differs": bool(d > CLIP_SHARE_PP or (ratio > CLIP_SHARE_RATIO and
                                                  d >= CLIP_SHARE_MIN_PP))}
