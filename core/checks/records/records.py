"""A run's probe records as numpy arrays, built once per call of the checks.

`RunRecords.from_records` takes the parsed JSONL dicts of `core/probe/FORMAT.md` (plus the
runner's `metric` records) in any order of types; step series keep the order of the records.
Missing values (`null` or absent) become NaN in the value arrays; values the probe really saw
as non-finite ("nan", "inf", "-inf" strings or floats) are also NaN/±inf there, and are kept
apart in `loss_nonfinite` / `grad_norm_nonfinite` so a NaN loss is never confused with a backend
that does not report the loss.

Multi-process runs: the records of all ranks come together (each record carries its `rank`).
The step series are rank 0's (else the lowest rank's); every rank's own series are in `ranks`
when more than one rank stepped, and every rank's facts in `rank_facts`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from portside.core.log import events as ev

from . import carry
from .integrity import Integrity
from .memo import Derived, FoldKey
from .steps import increasing

# One number parser for every reader of records (checks, metrics table, chart).
to_float = ev.record_number


@dataclass(frozen=True)
class RunEnd:
    """How a run ended, as the runner saw it (None fields: not known)."""
    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False
    stalled: bool = False
    error_type: str | None = None
    error_message: str | None = None
    wall_s: float | None = None
    stall_s: float | None = None  # the stall limit that was hit, for the evidence
    tail: tuple[str, ...] = ()  # the run's last output lines, where a crash's cause shows


# Optional per-step columns (FORMAT.md), NaN where a record lacks them; `extra` holds them.
EXTRA = ("epoch", "batch", "epoch_batches", "samples", "backward_calls", "clip_calls",
         "sched_steps", "skipped", "param_sum", "clip_value", "norm_type", "clip_reduced",
         "consumed")


@dataclass(eq=False)
class RunRecords:
    """One run's records. Arrays are aligned with `steps` (one entry per step record)."""
    steps: np.ndarray  # int64
    loss: np.ndarray
    grad_norm: np.ndarray
    max_norm: np.ndarray  # NaN where the step was not clipped
    lr: np.ndarray  # first param group
    lr_all: np.ndarray  # (n, groups), NaN-padded
    step_s: np.ndarray
    compiles: np.ndarray  # cumulative, NaN where not reported
    compile_s: np.ndarray
    loss_nonfinite: np.ndarray  # bool: the probe saw NaN/inf
    grad_norm_nonfinite: np.ndarray
    facts: dict[str, Any] | None = None  # the latest facts record
    exit: dict[str, Any] | None = None  # the exit record
    metrics: dict[str, list[float]] = field(default_factory=dict)  # name → values in order
    end: RunEnd | None = None  # None while the run is live
    name: str = ""
    extra: dict[str, np.ndarray] = field(default_factory=dict)  # EXTRA columns present
    ranks: dict[int, RunRecords] = field(default_factory=dict)  # per rank, when > 1 stepped
    rank_facts: dict[int, dict[str, Any]] = field(default_factory=dict)
    integrity: Integrity = field(default_factory=Integrity)  # portside's own records (integrity.py)
    # What the checks derive from these records (memo.py); not part of the data.
    derived: Derived = field(default_factory=Derived, init=False, repr=False, compare=False)

    @property
    def n(self) -> int:
        return int(self.steps.size)

    def series(self, name: str) -> np.ndarray:
        return {"loss": self.loss, "grad_norm": self.grad_norm, "lr": self.lr,
                "max_norm": self.max_norm, "step_s": self.step_s}[name]

    def col(self, name: str) -> np.ndarray:
        """An EXTRA column; all NaN when no record had it."""
        v = self.extra.get(name)
        return v if v is not None else np.broadcast_to(_NAN_SCALAR, (self.n,))  # read-only

    def has(self, name: str) -> bool:
        """Every step record reported this EXTRA column (memoised: the checks ask often, and
        a live snapshot is given the answer its fold carried)."""
        hit = self.derived.has.get(name)
        if hit is None:
            v = self.extra.get(name)
            hit = self.derived.has[name] = v is not None and self.n > 0 and bool(np.isfinite(v).all())
        return hit

    @property
    def world_size(self) -> int:
        ws = (self.facts or {}).get("world_size")
        return max(int(ws) if isinstance(ws, int) else 1, len(self.ranks) or 1)

    def steps_increasing(self) -> bool:
        """Steps strictly increasing (memoised: the checks ask on every live pass)."""
        v = self.derived.increasing
        if v is None:
            v = self.derived.increasing = carry.folded(self, FoldKey("increasing"), lambda: True,
                                                    _fold_increasing)
        return v

    def last_metric(self, name: str) -> float | None:
        vals = self.metrics.get(name)
        return vals[-1] if vals else None

    @classmethod
    def from_records(cls, records: Iterable[Mapping[str, Any]], end: RunEnd | None = None,
                     name: str = "") -> RunRecords:
        by_rank: dict[Any, list[Mapping[str, Any]]] = {}
        facts: dict[str, Any] | None = None
        rank_facts: dict[int, dict[str, Any]] = {}
        exits: dict[Any, dict[str, Any]] = {}
        metrics: dict[str, list[float]] = {}
        integrity = Integrity()
        for rec in records:
            typ = rec.get("type")
            integrity.add(rec)
            if typ == "step":
                by_rank.setdefault(rec.get("rank", 0), []).append(rec)
            elif typ == "metric":
                v = to_float(rec.get("value"))
                if v is not None and rec.get("name"):
                    metrics.setdefault(str(rec["name"]), []).append(v)
            elif typ == "facts":
                rank = rec.get("rank", 0)
                if isinstance(rank, int):
                    rank_facts[rank] = dict(rec)
                if facts is None or rank in (0, None) or rank == facts.get("rank"):
                    facts = dict(rec)
            elif typ == "exit":
                exits[rec.get("rank", 0)] = dict(rec)
        ranked = sorted(k for k in by_rank if isinstance(k, int))
        main = ranked[0] if ranked else None
        steps = by_rank.get(main, []) if ranked else [r for v in by_rank.values() for r in v]
        if main is not None and main in rank_facts:
            facts = rank_facts[main]
        exit_rec = exits.get(main) or exits.get(0) or next(iter(exits.values()), None)
        out = cls._from_steps(steps, facts=facts, exit=exit_rec, metrics=metrics, end=end,
                              name=name)
        if len(ranked) > 1:
            out.ranks = {k: cls._from_steps(by_rank[k], facts=rank_facts.get(k),
                                            exit=exits.get(k), name=f"{name}/rank{k}")
                         for k in ranked}
        out.rank_facts = rank_facts
        out.integrity = integrity
        return out

    @classmethod
    def _from_steps(cls, records: list[Mapping[str, Any]], **kw: Any) -> RunRecords:
        steps: list[int] = []
        cols: dict[str, list[float]] = {k: [] for k in
                                        ("loss", "grad_norm", "max_norm", "step_s", "compiles", "compile_s")}
        extra: dict[str, np.ndarray]
        lrs: list[list[float]] = []
        nf_loss: list[bool] = []
        nf_grad: list[bool] = []
        nan = math.nan
        for rec in records:
            steps.append(int(rec.get("step", len(steps))))
            for key, col in cols.items():
                v = to_float(rec.get(key))
                col.append(nan if v is None else v)
            loss, grad = cols["loss"][-1], cols["grad_norm"][-1]
            nf_loss.append(not math.isfinite(loss) and rec.get("loss") is not None)
            nf_grad.append(not math.isfinite(grad) and rec.get("grad_norm") is not None)
            lr = rec.get("lr")
            if isinstance(lr, list):
                lrs.append([nan if (x := to_float(v)) is None else x for v in lr])
            else:
                x = to_float(lr)
                lrs.append([nan if x is None else x])
        extra = {}
        n = len(steps)
        present: set[str] = set()
        for rec in records:
            present.update(rec.keys())
        for key in EXTRA:  # column-wise, only those some record carries
            if key not in present:
                continue
            vals = [rec.get(key) for rec in records]
            if vals.count(None) == n:
                continue
            try:  # None -> NaN, bools -> 1/0 (clip_reduced), numbers and "nan"/"inf" as such
                extra[key] = np.array(vals, dtype=np.float64)
            except (TypeError, ValueError):
                extra[key] = np.array([nan if (x := _extra_number(v)) is None else x
                                       for v in vals], dtype=np.float64)
        groups = max((len(x) for x in lrs), default=1) or 1
        lr_all = np.full((len(lrs), groups), np.nan)
        for i, row in enumerate(lrs):
            lr_all[i, : len(row)] = row
        arr = {k: np.asarray(v, dtype=np.float64) for k, v in cols.items()}
        return cls(steps=np.asarray(steps, dtype=np.int64), lr=lr_all[:, 0].copy(), lr_all=lr_all,
                   loss_nonfinite=np.asarray(nf_loss, dtype=bool),
                   grad_norm_nonfinite=np.asarray(nf_grad, dtype=bool),
                   extra=extra, loss=arr["loss"], grad_norm=arr["grad_norm"], max_norm=arr["max_norm"],
                   step_s=arr["step_s"], compiles=arr["compiles"], compile_s=arr["compile_s"],
                   **kw)

    @classmethod
    def from_arrays(cls, steps: Any = None, *, loss: Any = None, grad_norm: Any = None,
                    max_norm: Any = None, lr: Any = None, step_s: Any = None,
                    compiles: Any = None, compile_s: Any = None,
                    facts: dict[str, Any] | None = None, exit: dict[str, Any] | None = None,
                    metrics: dict[str, list[float]] | None = None, end: RunEnd | None = None,
                    name: str = "", extra: dict[str, Any] | None = None) -> RunRecords:
        """Build from arrays (tests, benchmarks); omitted series are all-NaN. `lr` may be 1-D
        (one group) or 2-D (steps × groups). Every non-finite loss/grad_norm counts as seen."""
        lengths = [np.size(x) if np.ndim(x) < 2 else np.shape(x)[0]
                   for x in (steps, loss, grad_norm, max_norm, lr, step_s, compiles, compile_s)
                   if x is not None]
        n = max(lengths, default=0)
        st = np.arange(n, dtype=np.int64) if steps is None else np.asarray(steps, dtype=np.int64)

        def col(x: Any) -> np.ndarray:
            return np.full(n, np.nan) if x is None else np.asarray(x, dtype=np.float64)

        lr_all = np.full((n, 1), np.nan) if lr is None else np.asarray(lr, dtype=np.float64)
        if lr_all.ndim == 1:
            lr_all = lr_all[:, None]
        ls, gn = col(loss), col(grad_norm)
        return cls(steps=st, loss=ls, grad_norm=gn, max_norm=col(max_norm), lr=lr_all[:, 0].copy(),
                   lr_all=lr_all, step_s=col(step_s), compiles=col(compiles),
                   compile_s=col(compile_s),
                   loss_nonfinite=(~np.isfinite(ls)) if loss is not None else np.zeros(n, bool),
                   grad_norm_nonfinite=(~np.isfinite(gn)) if grad_norm is not None else np.zeros(n, bool),
                   facts=facts, exit=exit, metrics=dict(metrics or {}), end=end, name=name,
                   extra={k: np.asarray(v, dtype=np.float64) for k, v in (extra or {}).items()})

    def upto(self, last_step: int) -> RunRecords:
        """The step series cut at `last_step` (inclusive); facts, exit and end are dropped —
        used to compare references with a live candidate over the same range."""
        ordered = self.derived.ordered
        if ordered is None:
            ordered = self.derived.ordered = _sorted(self.steps)
        k = int(np.searchsorted(self.steps, last_step, side="right")) if ordered \
            else int(np.count_nonzero(self.steps <= last_step))
        if k == self.n:
            return self
        if not ordered:
            m = self.steps <= last_step
            pick = lambda a: a[m]  # noqa: E731
        else:
            pick = lambda a: a[:k]  # noqa: E731
        out = RunRecords(steps=pick(self.steps), loss=pick(self.loss),
                         grad_norm=pick(self.grad_norm), max_norm=pick(self.max_norm),
                         lr=pick(self.lr), lr_all=pick(self.lr_all), step_s=pick(self.step_s),
                         compiles=pick(self.compiles), compile_s=pick(self.compile_s),
                         loss_nonfinite=pick(self.loss_nonfinite),
                         grad_norm_nonfinite=pick(self.grad_norm_nonfinite),
                         facts=self.facts, metrics=self.metrics, name=self.name,
                         extra={k: pick(v) for k, v in self.extra.items()},
                         ranks={k: r.upto(last_step) for k, r in self.ranks.items()},
                         rank_facts=self.rank_facts)
        if ordered:  # its rows are our first k: facts of them are carried with ours (carry.py)
            out.derived.cut_of = (self, k)
        return out


_NAN_SCALAR = np.array(np.nan)


def _extra_number(v: Any) -> float | None:
    return float(v) if isinstance(v, bool) else to_float(v)


def _fold_increasing(ok: bool, src: RunRecords, a: int, b: int) -> bool:
    # rows a-1..b-1: the new ones and the step before them
    return ok and increasing(src.steps[max(a - 1, 0):b])


def _sorted(a: np.ndarray) -> bool:
    return a.size < 2 or bool(np.all(a[1:] >= a[:-1]))
