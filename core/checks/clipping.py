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

from portside.core.log.criteria import Criteria

from .alarms import Alarm
from .evidence import ClipConfig, ClippingChanged, ClipShare
from .ranks import diverged
from .records import carry
from .records.comparison import Comparison
from .records.memo import FoldKey
from .records.records import RunRecords
from .records.steps import common_where, increasing, index_of

CLIP_SHARE_PP = 0.25  # clipped share differing by more than 25 points…
CLIP_SHARE_RATIO = 3.0  # …or by more than 3x (and by at least 5 points)
CLIP_SHARE_MIN_PP = 0.05
CLIP_MIN_STEPS = 20  # clipped-share comparisons need this many clipped-or-not steps
RANK_SPREAD = 1e-4  # per-rank clip norms differing by more than this (relative) are local
RANK_SAME = 1e-6  # …where the reference's agree to within this


def clip_stats(r: RunRecords) -> dict[str, Any]:
    """Memoised per run (references are judged on every live call)."""
    val = r.derived.clip_stats
    if val is None:
        val = r.derived.clip_stats = _clip_stats(r)
    return val


def _clip_stats(r: RunRecords) -> dict[str, Any]:
    return _clip_dict(r, _clip_fold(r))["stats"]


def clip_config(r: RunRecords) -> dict[str, Any]:
    """What the code asked for, per run: the things clipping-changed compares (memoised)."""
    val = r.derived.clip_config
    if val is None:
        val = r.derived.clip_config = _clip_config(r)
    return val


def _clip_config(r: RunRecords) -> dict[str, Any]:
    got = _clip_dict(r, _clip_fold(r))
    cfg = got["config"]
    red = cfg.pop("before_reduction")
    return {**got["stats"], **cfg, "world_size": r.world_size, "before_reduction": red}


# The clip facts fold row by row (carry.py): counts, the first max_norm and whether every one
# equals it, the smallest few distinct values (the smallest k of a union are among the smallest
# k of its parts) and a histogram of clip calls for their median. A zero among the distinct
# values (np.unique keeps -0.0 or 0.0 as its sort happens to order them) or many distinct
# clip-call counts end the carrying: then the whole is folded at once, as a rebuild.
_FEW = {"max_norm": 8, "norm_type": 4, "clip_value": 4}
_HIST_MAX = 64


def _clip_fold(r: RunRecords) -> dict[str, Any]:
    st = carry.folded(r, FoldKey("clip"), _clip_start, _clip_rows)
    if st is carry.OFF:
        st = _clip_rows(_clip_start(), r, 0, r.n, whole=True)
    return st


def _clip_start() -> dict[str, Any]:
    return {"used": 0, "judged": 0, "clipped": 0, "first": None, "same": True,
            "max_norm": np.zeros(0), "norm_type": np.zeros(0), "clip_value": np.zeros(0),
            "value_steps": 0, "calls": {}, "red": 0, "red0": 0}


def _few(st: dict[str, Any], name: str, vals: np.ndarray, whole: bool) -> bool:
    """Merge vals' distinct values into the kept smallest ones; False: stop carrying."""
    u = np.unique(vals)
    if not whole and u.size and bool((u == 0).any()):
        return False
    st[name] = np.union1d(st[name], u)[: _FEW[name]] if st[name].size else u[: _FEW[name]]
    return True


def _clip_rows(st: Any, src: RunRecords, a: int, b: int, whole: bool = False) -> Any:
    mn, gn = src.max_norm[a:b], src.grad_norm[a:b]
    used = np.isfinite(mn)
    mv = mn[used]
    with np.errstate(invalid="ignore"):
        j = used & np.isfinite(gn)
        clipped = int(np.count_nonzero(j & (gn > mn)))
    st = dict(st)  # the kept state is never changed in place
    st["used"] += int(mv.size)
    st["judged"] += int(j.sum())
    st["clipped"] += clipped
    if mv.size:
        if st["first"] is None:
            st["first"] = float(mv[0])
        st["same"] = st["same"] and bool((mv == st["first"]).all())
        if not _few(st, "max_norm", np.round(mv, 9), whole):
            return carry.OFF
    nt = src.col("norm_type")[a:b][used]
    nt = np.where(np.isfinite(nt) | np.isinf(nt), nt, 2.0)  # absent: the default 2-norm
    cv = src.col("clip_value")[a:b]
    cv = cv[np.isfinite(cv)]
    st["value_steps"] += int(cv.size)
    if not (_few(st, "norm_type", nt, whole) and _few(st, "clip_value", np.round(cv, 9), whole)):
        return carry.OFF
    calls = src.col("clip_calls")[a:b]
    calls = calls[used & np.isfinite(calls)]
    if calls.size:
        if whole:
            st["calls_all"] = calls
        else:
            hist = carry.counted(st["calls"], calls)
            if len(hist) > _HIST_MAX or 0.0 in hist:
                return carry.OFF
            st["calls"] = hist
    red = src.col("clip_reduced")[a:b]
    red = red[np.isfinite(red)]
    st["red"] += int(red.size)
    st["red0"] += int(np.count_nonzero(red == 0))
    return st


def _clip_dict(r: RunRecords, st: dict[str, Any]) -> dict[str, Any]:
    n_used, judged = st["used"], st["judged"]
    if n_used and st["same"]:
        values = [st["first"]]  # the usual constant max_norm
    else:
        values = st["max_norm"].tolist() if n_used else []
    stats = {"steps": r.n, "clip_steps": n_used, "max_norm": values[:8],
             "uses_share": n_used / r.n if r.n else 0.0,
             "clipped_share": st["clipped"] / judged if judged else None, "judged": judged}
    if "calls_all" in st:
        calls: float | None = float(np.median(st["calls_all"]))
    else:
        calls = carry.hist_median(st["calls"]) if st["calls"] else None
    config = {"norm_type": st["norm_type"].tolist(), "clip_value": st["clip_value"].tolist(),
              "value_steps": st["value_steps"], "clip_calls": calls,
              "before_reduction": st["red0"] / st["red"] if st["red"] else None}
    return {"stats": stats, "config": config}


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
    live = r.derived.live
    if live is not None:
        carried = _carried_spread(live.rank_spread, r)
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
    common = common_where(runs, lambda x: np.isfinite(x.max_norm) & np.isfinite(x.grad_norm))
    if common is None or common.size == 0:
        return None
    norms = []
    for x in runs:
        norms.append(x.grad_norm[index_of(common, x.steps, x.steps_increasing())])
    a = np.vstack(norms)
    top = np.maximum(np.abs(a).max(axis=0), 1e-30)
    return float(np.median((a.max(axis=0) - a.min(axis=0)) / top))


_UNKNOWN = object()


def _carried_spread(memo: dict[tuple[Any, ...], dict[str, Any]], r: RunRecords) -> object:
    """rank_norm_spread on a live run's snapshot: the per-step spreads of earlier passes are
    kept (`memo`: the live memo's, by ranks; rows are only appended), only new rows are
    added; _UNKNOWN when the ranks' steps are not one increasing sequence (the general path
    then)."""
    key = tuple(r.ranks)
    st = memo.get(key) or {"m": 0, "vals": carry.Buf(np.float64), "zeros": 0, "seen": {}}
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
        new = (a.max(axis=0) - a.min(axis=0)) / top
        st["vals"].extend(new)
        st["zeros"] += int(np.count_nonzero(new == 0))
    st["m"] = m
    memo[key] = st
    k = st["vals"].n
    if k and k // 2 < st["zeros"]:  # spreads are >= 0: the middle ones are zeros (reduced)
        return 0.0
    return float(np.median(st["vals"].view())) if k else None


def _same_values(a: list[float], b: list[float]) -> bool:
    return all(any(x == y or (np.isfinite(x - y) and abs(x - y) <= 1e-6 * max(abs(x), abs(y)))
                   for y in b) for x in a)


def _fmt(vals: list[float]) -> str:
    return "/".join(f"{v:g}" for v in vals) or "none"


def check_clipping(c: Comparison, criteria: Criteria) -> list[Alarm]:
    """The clip configuration differs from every reference's. References are cut to the
    candidate's steps so a live run compares like with like."""
    cand, final = c.cand, c.final
    if not c.refs or cand.n == 0:
        return []
    cuts = c.cuts
    rs = [clip_config(r) for r in cuts]
    cs = clip_config(cand)
    min_steps = 1 if final else max(criteria.drift.window, 5)
    ref_vals = sorted({v for s in rs for v in s["max_norm"]})
    ref_all_clip = all(s["clip_steps"] > 0 for s in rs)
    ref_none_clip = all(s["clip_steps"] == 0 for s in rs)

    def alarm(reason: str, title: str, severity: str = "error") -> list[Alarm]:
        _with_spread(cs, cand)
        for s, r in zip(rs, cuts, strict=True):
            _with_spread(s, r)
        ev = ClippingChanged(candidate=_config(cs), references=[_config(s) for s in rs],
                             reason=reason)
        return [Alarm("clipping-changed", severity, title, ev, key="clipping-changed")]

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


def _config(cfg: dict[str, Any]) -> ClipConfig:
    """A run's clip configuration (clip_config, with its rank_spread), as evidence."""
    return ClipConfig(
        steps=cfg["steps"], clip_steps=cfg["clip_steps"], max_norm=cfg["max_norm"],
        uses_share=cfg["uses_share"], clipped_share=cfg["clipped_share"], judged=cfg["judged"],
        norm_type=cfg["norm_type"], clip_value=cfg["clip_value"],
        value_steps=cfg["value_steps"], clip_calls=cfg["clip_calls"],
        world_size=cfg["world_size"], before_reduction=cfg["before_reduction"],
        rank_spread=cfg["rank_spread"])


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


def clip_share(cmp: Comparison) -> ClipShare | None:
    """The clipped share of steps, candidate vs references, when the configuration is the same
    (same max_norm); `differs` when the share moved more than the thresholds. Evidence for the
    drift alarm: the gradients changed."""
    cand = cmp.cand
    if not cmp.refs or cand.n == 0:
        return None
    rs = [clip_stats(r) for r in cmp.cuts]
    cs = clip_stats(cand)
    ref_shares = [s["clipped_share"] for s in rs if s["clipped_share"] is not None and
                  s["judged"] >= CLIP_MIN_STEPS]
    if cs["clipped_share"] is None or cs["judged"] < CLIP_MIN_STEPS or not ref_shares:
        return None
    c, r = cs["clipped_share"], float(np.mean(ref_shares))
    d = abs(c - r)
    ratio = max(c, r) / max(min(c, r), 1e-12)
    return ClipShare(candidate=c, reference=r, max_norm=cs["max_norm"],
                     differs=bool(d > CLIP_SHARE_PP or (ratio > CLIP_SHARE_RATIO and
                                                        d >= CLIP_SHARE_MIN_PP)))
