"""Checks across the ranks of one multi-process run.

`ranks-diverged`: data-parallel ranks must hold the same parameters after every step (the same
initial weights, the same reduced gradients). The probe checksums the parameters every few steps
(`param_sum`); ranks whose checksums drift apart while the reference's agree never reduced their
gradients (or reduced only some of them).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .alarms import Alarm
from .records import RunRecords
from .steps import index_of, intersect

PARAM_RTOL = 1e-5  # float noise of a float64 sum over identical float32 parameters is ~0


def rank_divergence(r: RunRecords) -> dict[str, Any] | None:
    """Relative spread of the ranks' parameter checksums at each checked step; None when fewer
    than two ranks report checksums. Memoised per run (asked twice per call of the checks)."""
    key = ("rank_divergence",)
    if key not in r._cache:
        r._cache[key] = _rank_divergence(r)
    return r._cache[key]


def _rank_divergence(r: RunRecords) -> dict[str, Any] | None:
    runs = {k: x for k, x in r.ranks.items() if np.isfinite(x.col("param_sum")).any()}
    if len(runs) < 2:
        return None
    common = None
    for x in runs.values():
        s = x.steps[np.isfinite(x.col("param_sum"))]
        inc = x.steps_increasing()
        common = s if common is None else intersect(common, s, inc, inc)
    if common is None or common.size == 0:
        return None
    sums = {}
    for k, x in runs.items():
        sums[k] = x.col("param_sum")[index_of(common, x.steps, x.steps_increasing())]
    a = np.vstack(list(sums.values()))
    scale = np.maximum(np.abs(a).max(axis=0), 1.0)
    spread = (a.max(axis=0) - a.min(axis=0)) / scale
    return {"steps": common, "spread": spread, "sums": sums}


def diverged(r: RunRecords) -> bool:
    d = rank_divergence(r)
    return d is not None and bool((d["spread"] > PARAM_RTOL).any())


def check_ranks(refs: list[RunRecords], cand: RunRecords) -> list[Alarm]:
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
        {"first_step": step, "ranks": sorted(d["sums"]),
         "param_sums": {str(k): float(v[i]) for k, v in d["sums"].items()},
         "relative_spread": float(d["spread"][i]), "steps_checked": int(d["steps"].size),
         "steps_diverged": int(bad.sum()), "world_size": cand.world_size},
        key="ranks-diverged")]
