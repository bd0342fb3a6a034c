"""Two runs' step records side by side: which rows pair up, and which numbers differ.

The compare view (tui/screens/compare.py) shows a reference and a candidate row by row. Rows pair
the way the checks compare (core/checks/records/alignment.py): by training progress (epoch + fraction of
the epoch) when both runs report it and their steps per epoch differ (`drop_last=True`, another
batch size), else by step number. Every step record of both runs gets a row: a reference step
no candidate step maps to stands alone (the candidate side of its row is empty), so scrolling
never hides a record. Pure numpy, no Textual.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from portside.core.checks.evidence import (
    Evidence,
    LrScheduleChanged,
    NonFinite,
    NumericDrift,
    RanksDiverged,
)
from portside.core.checks.records.alignment import by_progress, map_to
from portside.core.checks.records.facts import progress
from portside.core.checks.records.records import RunRecords
from portside.core.log import events as ev

COMPARED = ("loss", "grad_norm", "lr", "max_norm")
# The learning rate and max_norm are set, not measured: any difference beyond float noise is one.
EXACT_RTOL = 1e-6


@dataclass(frozen=True)
class Pairing:
    mode: str  # "progress" | "step"
    cand: np.ndarray  # per row: index of the candidate step record, -1 for none
    ref: np.ndarray  # per row: index of the reference step record, -1 for none

    def __len__(self) -> int:
        return int(self.cand.size)


def pair(cand: RunRecords, ref: RunRecords) -> Pairing:
    """Rows of the side-by-side view, in order of training progress."""
    if cand.n and ref.n and by_progress(cand, [ref]):
        m = map_to(cand, ref)
        used = np.zeros(ref.n, bool)
        used[m[m >= 0]] = True
        lone = np.flatnonzero(~used)
        keys = np.concatenate([progress(cand), progress(ref)[lone]])
        # A lone reference row sorts after a candidate row of the same progress.
        tie = np.concatenate([np.zeros(cand.n), np.ones(lone.size)])
        order = np.lexsort((tie, keys))
        c = np.concatenate([np.arange(cand.n), np.full(lone.size, -1)])[order]
        r = np.concatenate([m, lone])[order]
        return Pairing("progress", c.astype(np.int64), r.astype(np.int64))
    steps = np.union1d(cand.steps, ref.steps)
    return Pairing("step", _index_of(cand.steps, steps), _index_of(ref.steps, steps))


def _index_of(have: np.ndarray, want: np.ndarray) -> np.ndarray:
    """For each of `want`, the index of the first equal entry of `have`, or -1."""
    if have.size == 0:
        return np.full(want.size, -1, np.int64)
    order = np.argsort(have, kind="stable")
    pos = np.searchsorted(have[order], want)
    pos_c = np.minimum(pos, have.size - 1)
    hit = have[order][pos_c] == want
    return np.where(hit, order[pos_c], -1).astype(np.int64)


def tolerances(criteria: Mapping[str, Any] | None) -> dict[str, tuple[float, float]]:
    """(rtol, atol) per compared series: the drift check's for the measured series (from the
    session's criteria, else its defaults), float noise for the set ones."""
    from portside.core.log.criteria import DriftCriteria

    d = DriftCriteria()
    drift = (criteria or {}).get("drift") if isinstance(criteria, Mapping) else None
    drift = drift if isinstance(drift, Mapping) else {}
    rtol = _num(drift.get("rtol"), d.rtol)
    atol = _num(drift.get("atol"), d.atol)
    return {"loss": (rtol, atol), "grad_norm": (rtol, atol), "lr": (EXACT_RTOL, 0.0),
            "max_norm": (EXACT_RTOL, 0.0)}


def differing(cand: RunRecords, ref: RunRecords, p: Pairing,
              tol: Mapping[str, tuple[float, float]]) -> dict[str, np.ndarray]:
    """Per compared series, a bool per row: both sides have a value and they differ beyond the
    tolerance (|c − r| > atol + rtol·|r|), or one side is non-finite and the other is not."""
    both = (p.cand >= 0) & (p.ref >= 0)
    ci, ri = np.maximum(p.cand, 0), np.maximum(p.ref, 0)
    out = {}
    for name in COMPARED:
        cs, rs = cand.series(name), ref.series(name)
        if cs.size == 0 or rs.size == 0:
            out[name] = np.zeros(len(p), bool)
            continue
        c, r = cs[ci], rs[ri]
        rtol, atol = tol.get(name, (0.0, 0.0))
        with np.errstate(invalid="ignore"):
            far = np.abs(c - r) > atol + rtol * np.abs(r)
        seen = ~np.isnan(c) & ~np.isnan(r)
        # NaN on one side only counts when the other side's probe saw a value: a backend that
        # does not report a series differs in coverage, not in numbers.
        nonfinite = np.isfinite(c) != np.isfinite(r)
        nonfinite &= ~(np.isnan(c) & ~_nonfinite_seen(cand, name)[ci])
        nonfinite &= ~(np.isnan(r) & ~_nonfinite_seen(ref, name)[ri])
        out[name] = both & ((seen & far) | nonfinite)
    return out


def _nonfinite_seen(r: RunRecords, name: str) -> np.ndarray:
    if name == "loss":
        return r.loss_nonfinite
    if name == "grad_norm":
        return r.grad_norm_nonfinite
    return np.zeros(r.n, bool)


def row_of_step(p: Pairing, cand: RunRecords, step: int) -> int | None:
    """The row of the candidate's step `step` (alarm evidence names candidate steps); the
    first row past it when that step has no record; None without rows."""
    if len(p) == 0:
        return None
    rows = np.flatnonzero(p.cand >= 0)
    if rows.size == 0:
        return 0
    steps = cand.steps[p.cand[rows]]
    hit = np.flatnonzero(steps >= step)
    return int(rows[hit[0]]) if hit.size else int(rows[-1])


def alarm_step(evidence: Evidence) -> int | None:
    """The candidate step an alarm points at: its first failing step (drift, lr, non-finite,
    ranks); None for a kind without one."""
    if isinstance(evidence, NumericDrift | LrScheduleChanged | NonFinite | RanksDiverged) \
            and isinstance(evidence.first_step, int):
        return evidence.first_step
    return None


def _num(v: Any, default: float) -> float:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else default


_COLS = ("step", "loss", "grad_norm", "lr", "max_norm", "epoch", "batch", "epoch_batches")


@dataclass
class StepColumns:
    """A run's main-rank step records as compact columns (8 bytes a value), growing as records
    arrive, with the number of log lines the run had printed when each arrived: where in the
    log that step's output lies."""
    cols: dict[str, array] = field(default_factory=lambda: {k: array("d") for k in _COLS})
    line: array = field(default_factory=lambda: array("q"))
    nonfinite: array = field(default_factory=lambda: array("b"))  # 1: loss, 2: grad_norm
    version: int = 0

    def __len__(self) -> int:
        return len(self.line)

    def add(self, rec: Mapping[str, Any], lines_so_far: int) -> None:
        if rec.get("rank") not in (None, 0):  # the run's series are rank 0's, as the checks'
            return
        nan = float("nan")
        for key, col in self.cols.items():
            v = rec.get(key)
            if key == "lr" and isinstance(v, list):
                v = v[0] if v else None
            x = ev.record_number(v)
            col.append(float(len(self.line)) if key == "step" and x is None
                       else nan if x is None else x)
        flags = 0
        for bit, key in ((1, "loss"), (2, "grad_norm")):
            x = ev.record_number(rec.get(key))
            # math, not numpy: a numpy call on one float costs ~1 µs, twice a record (a
            # replay's first frame folds ~1,000 of them)
            if rec.get(key) is not None and x is not None and not math.isfinite(x):
                flags |= bit
        self.nonfinite.append(flags)
        self.line.append(lines_so_far)
        self.version += 1

    def records(self, name: str = "") -> RunRecords:
        """A snapshot as RunRecords (copies: the columns keep growing under it)."""
        col = {k: np.frombuffer(v, dtype=np.float64).copy() if len(v) else np.zeros(0)
               for k, v in self.cols.items()}
        extra = {k: col[k] for k in ("epoch", "batch", "epoch_batches")
                 if np.isfinite(col[k]).any()}
        r = RunRecords.from_arrays(col["step"], loss=col["loss"], grad_norm=col["grad_norm"],
                                   lr=col["lr"], max_norm=col["max_norm"], name=name,
                                   extra=extra)
        flags = np.frombuffer(self.nonfinite, dtype=np.int8).copy() if len(self) else \
            np.zeros(0, np.int8)
        r.loss_nonfinite = (flags & 1) > 0  # NaN the probe saw, apart from NaN it never had
        r.grad_norm_nonfinite = (flags & 2) > 0
        return r

    def line_of(self, index: int) -> int:
        return int(self.line[index])

