"""A live run's records folded into growing arrays, so the checks never rebuild them.

`IncrementalRecords.add(records)` folds a batch in (each record once, amortised O(1): an array grows
by half its capacity when full); `snapshot(end, name)` returns a `RunRecords` equal, field by field, to
`RunRecords.from_records(everything added so far, end, name)` without touching the records again
— its arrays are read-only views of the first n rows, which later adds never write (they only
write past n, or into new arrays when a column widens). Ranks are merged as `from_records` does.

Memory (a day-long run: 1M steps x 8 ranks): a column holds one value while every row has the
same bits (max_norm, samples, epoch_batches, an absent column's NaN, the non-finite flags) and
becomes an array from the first row that differs; the ranks share a column while their rows
agree (data-parallel ranks log the same reduced gradient norm, lr, epoch, batch and parameter
checksum: see _Cell); steps 0..n-1 (the usual case) are one shared read-only array. All
lossless: the snapshot's arrays have the dtypes and bits `from_records` gives, some as
broadcast views.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from itertools import chain
from typing import Any

import numpy as np

from . import carry
from . import steps as steps_mod
from .integrity import Integrity
from .memo import LiveMemo
from .records import EXTRA, RunEnd, RunRecords, _extra_number, to_float
from .steps import arange

_COLS = ("loss", "grad_norm", "max_norm", "step_s", "compiles", "compile_s")
_NAN = math.nan


def _num(v: Any) -> float:
    x = to_float(v)
    return _NAN if x is None else x


def _floats(vals: list[Any]) -> np.ndarray:
    """A step column as from_records parses it: a float is itself, None NaN, anything else
    through the number parser."""
    if set(map(type, vals)) <= {float, type(None)}:
        return np.array(vals, np.float64)  # None -> NaN
    return np.array([v if type(v) is float else _num(v) for v in vals], np.float64)


def _seen_nonfinite(col: np.ndarray, recs: list[Mapping[str, Any]], key: str,
                    present: bool) -> np.ndarray:
    """Rows whose value is not finite though the record had one (NaN/inf seen by the probe)."""
    bad = ~np.isfinite(col)
    if not present or not bad.any():
        return np.zeros(col.size, bool)
    had = np.array([rec.get(key) is not None for rec in recs], bool)
    return bad & had


def _extra_values(vals: list[Any]) -> np.ndarray:
    # As from_records converts a column: numpy first, the number parser where numpy refuses.
    try:
        return np.array(vals, dtype=np.float64)
    except (TypeError, ValueError):
        return np.array([_NAN if (x := _extra_number(v)) is None else x for v in vals],
                        dtype=np.float64)


class _Col:
    """One column (rows, or rows x width): a single value while every row so far has the same
    bits — read back as a broadcast view, no memory per row (max_norm, samples, an absent
    column's NaN, the all-False non-finite flags) — and an array with spare capacity from the
    first row that differs. Lossless: rows are compared by their bits (-0.0 is not 0.0)."""

    __slots__ = ("a", "cap", "const", "n")

    def __init__(self, const: np.ndarray, n: int = 0) -> None:
        self.const = const  # never written in place: broadcast views handed out read it
        self.a: np.ndarray | None = None
        self.cap = 0
        self.n = n

    def put(self, vals: np.ndarray) -> None:
        k = vals.shape[0]
        n0, n1 = self.n, self.n + k
        if self.a is None:
            if n0 == 0 and k:  # no rows yet: the first one sets the value
                self.const = np.array(vals[0], copy=True)
            c = self.const
            if _same_bits(vals, c):
                self.n = n1
                return
            self.cap = max(n1, 1024)
            self.a = np.empty((self.cap, *c.shape), c.dtype)
            self.a[:n0] = c
        elif n1 > self.cap:
            self.cap = carry.grown(self.cap, n1)
            grown = np.empty((self.cap, *self.a.shape[1:]), self.a.dtype)
            grown[:n0] = self.a[:n0]
            self.a = grown  # views handed out keep the old array: it is never written again
        self.a[n0:n1] = vals
        self.n = n1

    def widen(self, width: int) -> None:
        """More lr groups: earlier rows get NaN in the new ones (a new array, as views hold)."""
        old = self.const.shape[0]
        const = np.full(width, _NAN)
        const[:old] = self.const
        self.const = const
        if self.a is not None:
            wide = np.full((self.cap, width), _NAN)
            wide[: self.n, :old] = self.a[: self.n]
            self.a = wide

    def rows(self, lo: int, hi: int) -> np.ndarray:
        if self.a is None:
            return np.broadcast_to(self.const, (hi - lo, *self.const.shape))
        return self.a[lo:hi]

    def prefix(self, n: int) -> _Col:
        """A new column holding this one's first n rows."""
        out = _Col(self.const, n)
        if self.a is not None:
            out.cap = max(n, 1024)
            out.a = np.empty((out.cap, *self.a.shape[1:]), self.a.dtype)
            out.a[:n] = self.a[:n]
        return out

    def view(self, n: int) -> np.ndarray:
        if self.a is None:
            return np.broadcast_to(self.const, (n, *self.const.shape))  # read-only
        v = self.a[:n]
        v.flags.writeable = False
        return v

    @property
    def nbytes(self) -> int:
        return self.const.nbytes + (0 if self.a is None else self.a.nbytes)


class _Cell:
    """One rank's column. Data-parallel ranks mostly log the same values (the reduced gradient
    norm, the lr, epoch and batch, the parameter checksum): a cell starts on a column common to
    every rank, whose row i is the first value any rank gave for row i; a rank whose rows are
    those rows needs no memory of its own. At the first row that differs (by its bits) the rank
    takes a copy of its rows so far and goes on alone. The common column only ever appends, so
    every view handed out stays as it was."""

    __slots__ = ("col", "n", "shared")

    def __init__(self, col: _Col, shared: bool, n: int = 0) -> None:
        self.col = col
        self.shared = shared  # else col is this rank's own, col.n == n
        self.n = n

    def put(self, vals: np.ndarray) -> None:
        n0, k = self.n, vals.shape[0]
        if self.shared:
            col = self.col
            have = min(col.n - n0, k)  # rows another rank wrote first (col.n >= n0 always)
            if have <= 0 or _same_bits(vals[:have], col.rows(n0, n0 + have)):
                if k > have:
                    col.put(vals[max(have, 0):])
                self.n = n0 + k
                return
            self.col, self.shared = col.prefix(n0), False
        self.col.put(vals)
        self.n = n0 + k

    def widen(self, width: int, common: dict[Any, _Col]) -> None:
        if self.n == 0 and self.shared:  # known from the first record: share that width
            self.col = common.setdefault(("lr_all", width), _Col(np.full(width, _NAN)))
            return
        if self.shared:
            self.col, self.shared = self.col.prefix(self.n), False
        self.col.widen(width)

    @property
    def width(self) -> int:
        return int(self.col.const.shape[0])

    def view(self, n: int) -> np.ndarray:
        return self.col.view(n)


def _same_bits(vals: np.ndarray, c: np.ndarray) -> bool:
    u = f"u{c.dtype.itemsize}"
    return bool((vals.view(u) == c.view(u)).all())


def _f64(x: float) -> np.ndarray:
    return np.array(x, np.float64)


class _Series:
    """One rank's step series in columns (see _Col)."""

    def __init__(self, common: dict[Any, _Col] | None = None) -> None:
        self.n = 0
        self.common = {} if common is None else common  # columns shared by the ranks

        def cell(key: Any, const: np.ndarray) -> _Cell:
            return _Cell(self.common.setdefault(key, _Col(const)), True)

        self.steps: _Col | None = None  # None while the steps are 0..n-1 (the usual case)
        self.given = cell("given", np.array(True))  # the record had a "step" (else: its position)
        self.cols = {k: cell(k, _f64(_NAN)) for k in _COLS}
        self.lr_all = cell(("lr_all", 1), np.full(1, _NAN))
        self.nf_loss = cell("nf_loss", np.array(False))
        self.nf_grad = cell("nf_grad", np.array(False))
        self.extra: dict[str, _Cell] = {}
        self.all_finite: dict[str, bool] = {}  # RunRecords.has, carried: every row so far
        # Derived facts the checks carry from pass to pass (core/checks/carry.py, series
        # .smoothed, drift.check_drift): valid because rows are only ever appended.
        self.memo = LiveMemo()

    def add(self, recs: list[Mapping[str, Any]]) -> None:
        k = len(recs)
        if not k:
            return
        n0, n1 = self.n, self.n + k
        # Parse first (this may raise, as from_records would): nothing is half-added. Each
        # column is read in one pass; where every value is of the usual type (int steps, float
        # or missing values) numpy converts the list at once, else each goes through the parser.
        got = [rec.get("step") for rec in recs]
        if set(map(type, got)) == {int}:
            steps = np.array(got, np.int64)  # every record has its step
            given = np.ones(k, bool)
        else:
            steps = np.array([int(rec.get("step", n0 + i)) for i, rec in enumerate(recs)],
                             np.int64)
            given = np.array(["step" in rec for rec in recs])
        present: set[str] = set().union(*recs)
        cols = {key: _floats([rec.get(key) for rec in recs]) if key in present
                else np.full(k, _NAN) for key in _COLS}
        nf_loss, nf_grad = (_seen_nonfinite(cols[key], recs, key, key in present)
                            for key in ("loss", "grad_norm"))
        lrs = None
        if "lr" in present:
            given_lr: list[Any] = [rec.get("lr") for rec in recs]
            kinds = set(map(type, given_lr))
            if kinds == {float}:  # one group, a float each
                lrs = np.array(given_lr, np.float64)[:, None]
            elif kinds == {list} and len(set(map(len, given_lr))) == 1 and set(
                    map(type, chain.from_iterable(given_lr))) <= {float, type(None)}:
                lrs = np.array(given_lr, np.float64).reshape(k, len(given_lr[0]))  # None: NaN
        if lrs is None:
            rows = []
            for rec in recs:
                lr = rec.get("lr")
                if type(lr) is list:
                    rows.append([v if type(v) is float else _num(v) for v in lr])
                else:
                    rows.append([_num(lr)])
            groups = max(len(x) for x in rows)
            if all(len(x) == groups for x in rows):
                lrs = np.array(rows, np.float64).reshape(k, groups)
            else:
                lrs = np.full((k, groups), _NAN)
                for i, row in enumerate(rows):
                    lrs[i, : len(row)] = row
        extra = {}
        for key in EXTRA:
            if key not in present:
                continue  # nothing to write: new rows are NaN already
            vals = [rec.get(key) for rec in recs]
            if vals.count(None) < k:
                extra[key] = _extra_values(vals)
        groups, width, lr = lrs.shape[1], self.lr_all.width, lrs
        if groups > width:
            self.lr_all.widen(groups, self.common)
        elif groups < width:
            lr = np.concatenate((lr, np.full((k, width - groups), _NAN)), axis=1)
        if self.steps is None and not np.array_equal(steps, np.arange(n0, n1)):
            self.steps = _Col(np.array(0, np.int64))
            self.steps.put(arange(n0))
        if self.steps is not None:
            self.steps.put(steps)
        self.given.put(given)
        for key, col in cols.items():
            self.cols[key].put(col)
        self.nf_loss.put(nf_loss)
        self.nf_grad.put(nf_grad)
        self.lr_all.put(lr)
        for key in self.extra.keys() - extra.keys():
            self.all_finite[key] = False  # the new rows lack it
            self.extra[key].put(np.full(k, _NAN))
        for key, arr in extra.items():
            if key not in self.extra:  # from the first row: shared; later: this rank's own
                self.extra[key] = (
                    _Cell(self.common.setdefault(("extra", key), _Col(_f64(_NAN))), True)
                    if n0 == 0 else _Cell(_Col(_f64(_NAN), n0), False, n0))
                self.all_finite[key] = n0 == 0  # earlier rows lack it
            self.extra[key].put(arr)
            self.all_finite[key] = self.all_finite[key] and bool(np.isfinite(arr).all())
        self.n = n1

    def arrays(self) -> dict[str, Any]:
        """The first n rows of every column, read-only (views: later adds never write them)."""
        n = self.n
        c = self.cols
        lr_all = self.lr_all.view(n)
        return {"steps": arange(n) if self.steps is None else self.steps.view(n),
                "given": self.given.view(n), "lr": lr_all[:, 0], "lr_all": lr_all,
                "nf_loss": self.nf_loss.view(n), "nf_grad": self.nf_grad.view(n),
                **{k: c[k].view(n) for k in _COLS},
                "extra": {k: self.extra[k].view(n) for k in EXTRA if k in self.extra}}

    def view(self, **kw: Any) -> RunRecords:
        n = self.n
        out = _records(self.arrays(), **kw)
        for k, ok in self.all_finite.items():
            out.derived.has[k] = ok and n > 0
        out.derived.live = self.memo
        return out

    def columns(self) -> list[_Col]:
        cells = [self.given, self.lr_all, self.nf_loss, self.nf_grad, *self.cols.values(),
                 *self.extra.values()]
        return [c.col for c in cells] + ([self.steps] if self.steps is not None else [])


def _records(a: dict[str, Any], **kw: Any) -> RunRecords:
    """A RunRecords of the columns `_Series.arrays` names."""
    return RunRecords(steps=a["steps"], loss=a["loss"], grad_norm=a["grad_norm"],
                      max_norm=a["max_norm"], lr=a["lr"], lr_all=a["lr_all"],
                      step_s=a["step_s"], compiles=a["compiles"], compile_s=a["compile_s"],
                      loss_nonfinite=a["nf_loss"], grad_norm_nonfinite=a["nf_grad"],
                      extra=a["extra"], **kw)


class _Joined:
    """Step records of ranks that are not ints, one after the other (as from_records takes
    them); a record without a step takes its position in the joined list. Built per snapshot,
    with a fresh memo: positions move as the groups grow."""

    def __init__(self, parts: list[_Series]) -> None:
        self.parts = parts
        self.n = sum(p.n for p in parts)
        self.memo = LiveMemo()

    def view(self, **kw: Any) -> RunRecords:
        arrs = [p.arrays() for p in self.parts]
        cat = lambda k: np.concatenate([a[k] for a in arrs])  # noqa: E731
        steps = np.where(cat("given"), cat("steps"), np.arange(self.n, dtype=np.int64))
        g = max(a["lr_all"].shape[1] for a in arrs)
        lr_all = np.full((self.n, g), _NAN)
        i = 0
        for a in arrs:
            m = a["lr_all"].shape[0]
            lr_all[i: i + m, : a["lr_all"].shape[1]] = a["lr_all"]
            i += m
        keys = [k for k in EXTRA if any(k in a["extra"] for a in arrs)]
        extra = {k: np.concatenate([a["extra"][k] if k in a["extra"]
                                    else np.full(a["steps"].size, _NAN) for a in arrs])
                 for k in keys}
        joined = {k: cat(k) for k in (*_COLS, "nf_loss", "nf_grad")}
        out = _records({**joined, "steps": steps, "lr": lr_all[:, 0].copy(), "lr_all": lr_all,
                        "extra": extra}, **kw)
        out.derived.live = self.memo
        return out


class IncrementalRecords:
    """The growing records of one live run (all ranks); see the module doc."""

    def __init__(self) -> None:
        self.by_rank: dict[Any, _Series] = {}
        self.facts: dict[str, Any] | None = None
        self.rank_facts: dict[int, dict[str, Any]] = {}
        self.exits: dict[Any, dict[str, Any]] = {}
        self.metrics: dict[str, list[float]] = {}
        self.integrity = Integrity()
        self.count = 0  # records folded in
        self.common: dict[Any, _Col] = {}  # columns the ranks share while their rows agree

    def add(self, records: Iterable[Mapping[str, Any]]) -> None:
        steps: dict[Any, list[Mapping[str, Any]]] = {}
        for rec in records:
            self.count += 1
            typ = rec.get("type")
            self.integrity.add(rec)
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
                series = _Series(self.common)
            series.add(recs)  # parse errors raise before the rank is registered
            self.by_rank.setdefault(rank, series)

    def snapshot(self, end: RunEnd | None = None, name: str = "") -> RunRecords:
        """What `RunRecords.from_records` would build from every record added so far."""
        by_rank = self.by_rank
        ranked = sorted(k for k in by_rank if isinstance(k, int))
        main = ranked[0] if ranked else None
        series: _Series | _Joined
        if ranked:
            series = by_rank[main]
        elif len(by_rank) == 1:  # a lone group's positions are its own
            series = next(iter(by_rank.values()))
        else:
            series = _Joined(list(by_rank.values())) if by_rank else _Series()
        facts = self.facts
        if main is not None and main in self.rank_facts:
            facts = self.rank_facts[main]
        exits = self.exits
        exit_rec = exits.get(main) or exits.get(0) or next(iter(exits.values()), None)
        out = series.view(facts=facts, exit=exit_rec, end=end, name=name,
                          metrics={k: list(v) for k, v in self.metrics.items()})
        if len(ranked) > 1:
            out.ranks = {k: by_rank[k].view(facts=self.rank_facts.get(k), exit=exits.get(k),
                                            name=f"{name}/rank{k}") for k in ranked}
        out.rank_facts = dict(self.rank_facts)
        out.integrity = self.integrity.copy()
        return out

    @property
    def nbytes(self) -> int:
        """Bytes of the fold's arrays (the records' dicts are not kept), the shared steps
        0..n-1 once."""
        cols = {id(c): c for s in self.by_rank.values() for c in s.columns()}
        shared = any(s.steps is None for s in self.by_rank.values())
        return sum(c.nbytes for c in cols.values()) + (steps_mod._ARANGE.nbytes if shared else 0)
