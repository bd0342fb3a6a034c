"""A live run's records folded into growing arrays, so the checks never rebuild them.

`LiveRecords.add(records)` folds a batch in (each record once, amortised O(1): the arrays double
their capacity when full); `snapshot(end, name)` returns a `RunRecords` equal, field by field, to
`RunRecords.from_records(everything added so far, end, name)` without touching the records again
— its arrays are read-only views of the first n rows, which later adds never write (they only
write past n, or into new arrays when a column widens). Ranks are merged as `from_records` does.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from .records import EXTRA, RunEnd, RunRecords, _extra_number, to_float

_COLS = ("loss", "grad_norm", "max_norm", "step_s", "compiles", "compile_s")
_NAN = math.nan


def _num(v: Any) -> float:
    x = to_float(v)
    return _NAN if x is None else x


def _extra_values(vals: list[Any]) -> np.ndarray:
    # As from_records converts a column: numpy first, the number parser where numpy refuses.
    try:
        return np.array(vals, dtype=np.float64)
    except (TypeError, ValueError):
        return np.array([_NAN if (x := _extra_number(v)) is None else x for v in vals],
                        dtype=np.float64)


class _Series:
    """One rank's step series in arrays with spare capacity."""

    def __init__(self) -> None:
        self.n = 0
        self.cap = 0
        self.steps = np.zeros(0, np.int64)
        self.given = np.zeros(0, bool)  # the record had a "step" (else: its position)
        self.cols = {k: np.zeros(0) for k in _COLS}
        self.lr0 = np.zeros(0)
        self.lr_all = np.zeros((0, 1))
        self.nf_loss = np.zeros(0, bool)
        self.nf_grad = np.zeros(0, bool)
        self.extra: dict[str, np.ndarray] = {}
        self.all_finite: dict[str, bool] = {}  # RunRecords.has, carried: every row so far
        # Derived series the checks carry from pass to pass (numeric.smoothed, check_drift):
        # valid because rows are only ever appended.
        self.memo: dict[Any, Any] = {}

    def _grow(self, need: int) -> None:
        cap = max(need, 2 * self.cap, 1024)

        def grown(a: np.ndarray, fill: Any) -> np.ndarray:
            out = np.full((cap, *a.shape[1:]), fill, dtype=a.dtype)
            out[: self.n] = a[: self.n]
            return out

        self.steps, self.given = grown(self.steps, 0), grown(self.given, False)
        self.cols = {k: grown(v, _NAN) for k, v in self.cols.items()}
        self.lr0, self.lr_all = grown(self.lr0, _NAN), grown(self.lr_all, _NAN)
        self.nf_loss, self.nf_grad = grown(self.nf_loss, False), grown(self.nf_grad, False)
        self.extra = {k: grown(v, _NAN) for k, v in self.extra.items()}
        self.cap = cap

    def add(self, recs: list[Mapping[str, Any]]) -> None:
        k = len(recs)
        if not k:
            return
        n0, n1 = self.n, self.n + k
        # Parse first (this may raise, as from_records would): nothing is half-added.
        steps = [int(rec.get("step", n0 + i)) for i, rec in enumerate(recs)]
        given = ["step" in rec for rec in recs]
        cols: dict[str, list[float]] = {  # a float is itself: the usual value skips the parser
            key: [v if type(v) is float else _num(v) for v in [rec.get(key) for rec in recs]]
            for key in _COLS}
        nf_loss = [not math.isfinite(v) and rec.get("loss") is not None
                   for v, rec in zip(cols["loss"], recs, strict=True)]
        nf_grad = [not math.isfinite(v) and rec.get("grad_norm") is not None
                   for v, rec in zip(cols["grad_norm"], recs, strict=True)]
        lrs = []
        for rec in recs:
            lr = rec.get("lr")
            if type(lr) is list:
                lrs.append([v if type(v) is float else _num(v) for v in lr])
            else:
                lrs.append([_num(lr)])
        extra = {}
        for key in EXTRA:
            vals = [rec.get(key) for rec in recs]
            if vals.count(None) < k:  # else nothing to write: new rows are NaN already
                extra[key] = _extra_values(vals)
        if n1 > self.cap:
            self._grow(n1)
        groups = max(len(x) for x in lrs)
        if groups > self.lr_all.shape[1]:
            wide = np.full((self.cap, groups), _NAN)
            wide[: n0, : self.lr_all.shape[1]] = self.lr_all[: n0]
            self.lr_all = wide
        self.steps[n0:n1] = steps
        self.given[n0:n1] = given
        for key, col in cols.items():
            self.cols[key][n0:n1] = col
        self.nf_loss[n0:n1] = nf_loss
        self.nf_grad[n0:n1] = nf_grad
        for i, row in enumerate(lrs):
            self.lr_all[n0 + i, : len(row)] = row
        self.lr0[n0:n1] = [row[0] if row else _NAN for row in lrs]
        for key in self.extra.keys() - extra.keys():
            self.all_finite[key] = False  # the new rows lack it
        for key, arr in extra.items():
            if key not in self.extra:
                self.extra[key] = np.full(self.cap, _NAN)
                self.all_finite[key] = n0 == 0  # earlier rows lack it
            self.extra[key][n0:n1] = arr
            self.all_finite[key] = self.all_finite[key] and bool(np.isfinite(arr).all())
        self.n = n1

    def view(self, **kw: Any) -> RunRecords:
        n = self.n

        def ro(a: np.ndarray) -> np.ndarray:
            v = a[:n]
            v.flags.writeable = False
            return v

        c = self.cols
        out = RunRecords(steps=ro(self.steps), loss=ro(c["loss"]), grad_norm=ro(c["grad_norm"]),
                          max_norm=ro(c["max_norm"]), lr=ro(self.lr0), lr_all=ro(self.lr_all),
                          step_s=ro(c["step_s"]), compiles=ro(c["compiles"]),
                          compile_s=ro(c["compile_s"]), loss_nonfinite=ro(self.nf_loss),
                          grad_norm_nonfinite=ro(self.nf_grad),
                          extra={k: ro(self.extra[k]) for k in EXTRA if k in self.extra}, **kw)
        for k, ok in self.all_finite.items():
            out._cache[("has", k)] = ok and n > 0
        return out


def _joined(parts: list[_Series]) -> _Series:
    """Step records of ranks that are not ints, one after the other (as from_records takes
    them); a record without a step takes its position in the joined list."""
    out = _Series()
    out.n = out.cap = sum(p.n for p in parts)
    out.steps = np.concatenate([p.steps[: p.n] for p in parts])
    out.given = np.concatenate([p.given[: p.n] for p in parts])
    pos = np.arange(out.n, dtype=np.int64)
    out.steps = np.where(out.given, out.steps, pos)
    out.cols = {k: np.concatenate([p.cols[k][: p.n] for p in parts]) for k in _COLS}
    out.lr0 = np.concatenate([p.lr0[: p.n] for p in parts])
    g = max(p.lr_all.shape[1] for p in parts)
    out.lr_all = np.full((out.n, g), _NAN)
    i = 0
    for p in parts:
        out.lr_all[i: i + p.n, : p.lr_all.shape[1]] = p.lr_all[: p.n]
        i += p.n
    out.nf_loss = np.concatenate([p.nf_loss[: p.n] for p in parts])
    out.nf_grad = np.concatenate([p.nf_grad[: p.n] for p in parts])
    keys = [k for k in EXTRA if any(k in p.extra for p in parts)]
    out.extra = {k: np.concatenate([p.extra[k][: p.n] if k in p.extra else np.full(p.n, _NAN)
                                    for p in parts]) for k in keys}
    return out


class LiveRecords:
    """The growing records of one live run (all ranks); see the module doc."""

    def __init__(self) -> None:
        self.by_rank: dict[Any, _Series] = {}
        self.facts: dict[str, Any] | None = None
        self.rank_facts: dict[int, dict[str, Any]] = {}
        self.exits: dict[Any, dict[str, Any]] = {}
        self.metrics: dict[str, list[float]] = {}
        self.count = 0  # records folded in

    def add(self, records: Iterable[Mapping[str, Any]]) -> None:
        steps: dict[Any, list[Mapping[str, Any]]] = {}
        for rec in records:
            self.count += 1
            typ = rec.get("type")
            if typ == "step":
                steps.setdefault(rec.get("rank", 0), []).append(rec)
            elif typ == "metric":
                v = to_float(rec.get("value"))
                if v is not None and rec.get("name"):
                    self.metrics.setdefault(str(rec["name"]), []).append(v)
            elif typ == "facts":
                rank = rec.get("rank", 0)
                if isinstance(rank, int):
                    self.rank_facts[rank] = dict(rec)
                if self.facts is None or rank in (0, None) or rank == self.facts.get("rank"):
                    self.facts = dict(rec)
            elif typ == "exit":
                self.exits[rec.get("rank", 0)] = dict(rec)
        for rank, recs in steps.items():
            series = self.by_rank.get(rank)
            if series is None:
                series = _Series()
            series.add(recs)  # parse errors raise before the rank is registered
            self.by_rank.setdefault(rank, series)

    def snapshot(self, end: RunEnd | None = None, name: str = "") -> RunRecords:
        """What `RunRecords.from_records` would build from every record added so far."""
        by_rank = self.by_rank
        ranked = sorted(k for k in by_rank if isinstance(k, int))
        main = ranked[0] if ranked else None
        if ranked:
            series = by_rank[main]
        elif len(by_rank) == 1:  # a lone group's positions are its own
            series = next(iter(by_rank.values()))
        else:
            series = _joined(list(by_rank.values())) if by_rank else _Series()
        facts = self.facts
        if main is not None and main in self.rank_facts:
            facts = self.rank_facts[main]
        exits = self.exits
        exit_rec = exits.get(main) or exits.get(0) or next(iter(exits.values()), None)
        out = series.view(facts=facts, exit=exit_rec, end=end, name=name,
                          metrics={k: list(v) for k, v in self.metrics.items()})
        out._cache[("live",)] = series.memo
        if len(ranked) > 1:
            out.ranks = {k: by_rank[k].view(facts=self.rank_facts.get(k), exit=exits.get(k),
                                            name=f"{name}/rank{k}") for k in ranked}
        out.rank_facts = dict(self.rank_facts)
        return out
