"""Checks across the ranks of one multi-process run.

`ranks-diverged`: data-parallel ranks must hold the same parameters after every step (the same
initial weights, the same reduced gradients). The probe checksums the parameters every few steps
(`param_sum`); ranks whose checksums drift apart while the reference's agree never reduced their
gradients (or reduced only some of them).

`rank-averaging-changed`: the ranks' losses or gradients are combined differently — summed
instead of averaged (gradients W× the reference's), or averaged twice (1/W×) — seen as the
gradient norm at the same training progress scaled by the world size W (check_rank_average).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from portside.core.log.criteria import Criteria

from .alarms import Alarm
from .evidence import RankAveragingChanged, RanksDiverged
from .records import carry
from .records.comparison import Comparison, Pairing
from .records.memo import FoldKey
from .records.records import RunRecords
from .records.steps import common_where, index_of

PARAM_RTOL = 1e-5  # float noise of a float64 sum over identical float32 parameters is ~0


def rank_divergence(r: RunRecords) -> dict[str, Any] | None:
    """Relative spread of the ranks' parameter checksums at each checked step; None when fewer
    than two ranks report checksums. Memoised per run (asked twice per call of the checks)."""
    got = r.derived.rank_divergence
    if got is None:
        got = r.derived.rank_divergence = (_rank_divergence(r),)
    return got[0]


def _rank_divergence(r: RunRecords) -> dict[str, Any] | None:
    runs = {k: x for k, x in r.ranks.items() if _has_sums(x)}
    if len(runs) < 2:
        return None
    live = r.derived.live
    if live is not None:
        carried = _carried_divergence(live.rank_divergence, runs)
        if carried is not _UNKNOWN:
            return carried  # type: ignore[return-value]
    common = common_where(runs.values(), lambda x: np.isfinite(x.col("param_sum")))
    if common is None or common.size == 0:
        return None
    sums = {}
    for k, x in runs.items():
        sums[k] = x.col("param_sum")[index_of(common, x.steps, x.steps_increasing())]
    a = np.vstack(list(sums.values()))
    scale = np.maximum(np.abs(a).max(axis=0), 1.0)
    spread = (a.max(axis=0) - a.min(axis=0)) / scale
    return {"steps": common, "spread": spread, "sums": sums}


def _has_sums(x: RunRecords) -> bool:
    """Some step of this rank has a parameter checksum (carried: rows are only appended)."""
    def rows(st: bool, src: RunRecords, a: int, b: int) -> bool:
        v = src.extra.get("param_sum")
        return st or (v is not None and bool(np.isfinite(v[a:b]).any()))

    return bool(carry.folded(x, FoldKey("has_sums"), lambda: False, rows))


_UNKNOWN = object()


def _carried_divergence(memo: dict[tuple[Any, ...], dict[str, Any]],
                        runs: dict[int, RunRecords]) -> object:
    """_rank_divergence on a live run's snapshot: the checked steps, spreads and sums of
    earlier passes are kept (`memo`: the live memo's, by ranks), only new rows are added;
    _UNKNOWN when the ranks' steps are not one increasing sequence (the general path then)."""
    key = tuple(runs)
    st = memo.get(key) or {"m": 0, "steps": carry.Buf(np.int64), "spread": carry.Buf(np.float64),
                           "sums": {k: carry.Buf(np.float64) for k in runs}}
    if st.get("off"):
        return _UNKNOWN
    xs = list(runs.values())
    m0, m = st["m"], min(x.n for x in xs)
    if m < m0:
        return _UNKNOWN  # an older snapshot than the state
    first = xs[0].steps[m0:m]
    # Every rank's whole series increasing and all the same on the first m rows: then the
    # common steps are those rows where every rank has a checksum.
    if not all(x.steps_increasing() for x in xs) or not all(
            np.array_equal(x.steps[m0:m], first) for x in xs[1:]):
        memo[key] = {"off": True}
        return _UNKNOWN
    ok = np.ones(m - m0, bool)
    for x in xs:
        ok &= np.isfinite(x.extra["param_sum"][m0:m])
    if ok.any():
        a = np.vstack([x.extra["param_sum"][m0:m][ok] for x in xs])
        scale = np.maximum(np.abs(a).max(axis=0), 1.0)
        st["spread"].extend((a.max(axis=0) - a.min(axis=0)) / scale)
        st["steps"].extend(first[ok])
        for k, x in runs.items():
            st["sums"][k].extend(x.extra["param_sum"][m0:m][ok])
    st["m"] = m
    memo[key] = st
    if not st["steps"].n:
        return None
    return {"steps": st["steps"].view(), "spread": st["spread"].view(),
            "sums": {k: v.view() for k, v in st["sums"].items()}}


def diverged(r: RunRecords) -> bool:
    d = rank_divergence(r)
    return d is not None and bool((d["spread"] > PARAM_RTOL).any())


def check_ranks(c: Comparison, criteria: Criteria) -> list[Alarm]:
    refs, cand = c.refs, c.cand
    d = rank_divergence(cand)
    if d is None:
        return []
    bad = d["spread"] > PARAM_RTOL
    if not bad.any():
        return []
    for r in refs:
        rd = rank_divergence(r)
        if rd is not None and (rd["spread"] > PARAM_RTOL).any():
            return []  # the reference's ranks differ too (local SGD, per-rank models)
    i = int(np.argmax(bad))
    step = int(d["steps"][i])
    return [Alarm(
        "ranks-diverged", "error",
        f"ranks' parameters differ from step {step} on ({len(d['sums'])} ranks): gradients "
        "are not reduced across ranks",
        RanksDiverged(first_step=step, ranks=sorted(d["sums"]),
                      param_sums={str(k): float(v[i]) for k, v in d["sums"].items()},
                      relative_spread=float(d["spread"][i]),
                      steps_checked=int(d["steps"].size), steps_diverged=int(bad.sum()),
                      world_size=cand.world_size),
        key="ranks-diverged")]


# --- rank-averaging-changed ------------------------------------------------------------------

AVG_EARLY = 20  # compared steps: the first ones, before the trajectories part
AVG_TOL = 1.3  # a gradient-norm ratio within this factor of the world size (or its inverse)…
REF_TOL = 1.15  # …where the references' own ratios stay within this factor of 1


def norm_ratio(p: Pairing) -> dict[str, Any] | None:
    """Median candidate/reference ratio of the gradient norm (and of the loss) over the first
    AVG_EARLY steps compared at the same training progress where both report a norm."""
    cand, ref = p.cand, p.ref
    ic, ir = p.alignment.sel
    # Only the first AVG_EARLY usable points count: read growing prefixes of the compared
    # points, not both whole runs, until they are found (or the points end).
    total = len(range(*ic.indices(cand.n))) if isinstance(ic, slice) else int(ic.size)
    m = min(total, 4 * AVG_EARLY)
    while True:
        pc, pr = _first(ic, m), _first(ir, m)
        with np.errstate(invalid="ignore", divide="ignore"):
            g = cand.grad_norm[pc] / ref.grad_norm[pr]
        keep = np.flatnonzero(np.isfinite(g) & (g > 0))[:AVG_EARLY]
        if keep.size >= AVG_EARLY or m >= total:
            break
        m = min(total, 8 * m)
    if keep.size < AVG_EARLY // 2:
        return None
    with np.errstate(invalid="ignore", divide="ignore"):
        loss = (cand.loss[pc] / ref.loss[pr])[keep]
    loss = loss[np.isfinite(loss)]
    return {"grad_norm": float(np.median(g[keep])), "steps": int(keep.size),
            "loss": float(np.median(loss)) if loss.size else None}


def _first(sel: slice | np.ndarray, m: int) -> slice | np.ndarray:
    """The first m points of a selector."""
    if isinstance(sel, slice):
        start, stop, step = sel.indices(2**62)
        return slice(start, min(stop, start + m * step), step)
    return sel[:m]


def check_rank_average(c: Comparison, criteria: Criteria) -> list[Alarm]:
    """The candidate's gradients are the reference's times the world size W (rank losses or
    gradients summed instead of averaged: an all_reduce SUM without the division, a loss
    multiplied by W) or divided by W (averaged twice: a loss divided by W under DDP, which
    averages already), at the same training progress and the same global batch, while the
    references agree with each other. Ranks that never reduce are ranks-diverged's."""
    cand = c.cand
    w = cand.world_size
    refs = [r for r in c.refs if r.n]
    if w < 2 or not refs or cand.n < AVG_EARLY or diverged(cand):
        return []
    if c.batch is not None:
        return []  # another global batch changes the norms by itself: global-batch-changed
    ratios = [norm_ratio(p) for p in c.pairings if p.ref.n]
    if any(x is None for x in ratios):
        return []
    for r in refs[1:]:
        x = norm_ratio(Pairing(r, refs[0]))  # the references' own spread
        if x is None or abs(math.log(x["grad_norm"])) > math.log(REF_TOL):
            return []  # the references' norms vary too much between seeds to judge
    gs = [x["grad_norm"] for x in ratios if x is not None]
    for sign, how in ((1, "summed over the ranks instead of averaged"),
                      (-1, "averaged twice (divided by the world size once more than the "
                           "reference)")):
        target = w ** sign
        if all(abs(math.log(g / target)) <= math.log(AVG_TOL) for g in gs):
            g = float(np.median(gs))
            losses = [x["loss"] for x in ratios if x is not None and x["loss"] is not None]
            lossr = float(np.median(losses)) if losses else None
            scaled = "loss and gradients" if lossr is not None and lossr > 0 and abs(
                math.log(lossr / target)) <= math.log(AVG_TOL) else "gradients"
            return [Alarm(
                "rank-averaging-changed", "error",
                f"{scaled} {how}: gradient norm {g:.3g}× the reference's at the same progress "
                f"with {w} ranks",
                RankAveragingChanged(world_size=w, grad_norm_ratio=g, grad_norm_ratios=gs,
                                     loss_ratio=lossr,
                                     steps_compared=min(x["steps"] for x in ratios if x),
                                     direction="summed" if sign > 0 else "averaged-twice"),
                key="rank-averaging-changed")]
    return []
