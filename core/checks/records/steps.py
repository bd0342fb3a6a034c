"""Step numbers common to several series, fast on the usual strictly increasing ones.

`np.intersect1d` sorts (or hashes) both inputs on every call: about a second for two
million-step series, on every live pass. Step series are almost always strictly increasing;
then a binary search gives the same answer in a few milliseconds. Anything else (resets,
repeated steps) goes to `np.intersect1d`, so the results are the same either way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from . import carry


def increasing(a: np.ndarray) -> bool:
    """Strictly increasing (so sorted and unique)."""
    return a.size < 2 or bool((a[1:] > a[:-1]).all())


def intersect(a: np.ndarray, b: np.ndarray, a_inc: bool | None = None,
              b_inc: bool | None = None) -> np.ndarray:
    """`np.intersect1d(a, b)`: the sorted unique values in both."""
    if (increasing(a) if a_inc is None else a_inc) and (increasing(b) if b_inc is None else b_inc):
        if a.size == b.size and np.array_equal(a, b):
            return a.copy()
        if a.size > b.size:
            a, b = b, a
        j = np.minimum(np.searchsorted(b, a), max(b.size - 1, 0))
        return a[b[j] == a] if b.size else a[:0]
    return np.intersect1d(a, b)


def common_where(runs: Iterable[Any], where: Callable[[Any], np.ndarray]) -> np.ndarray | None:
    """The steps at which every run (a RunRecords) has ``where(run)``, sorted and unique (the
    first run's own steps too, as every intersection is: a step repeated after a counter reset
    would otherwise stay twice and misalign the ranks); None for no runs."""
    common = None
    for x in runs:
        s = x.steps[where(x)]
        inc = x.steps_increasing()
        common = (s if inc else np.unique(s)) if common is None else intersect(common, s, inc, inc)
    return common


def index_of(common: np.ndarray, b: np.ndarray, b_inc: bool | None = None) -> np.ndarray:
    """Where `common` (sorted, unique, every value in `b`) lies in `b`: the indices
    `np.intersect1d(common, b, return_indices=True)` gives."""
    if b_inc if b_inc is not None else increasing(b):
        if common.size == b.size:
            return np.arange(b.size, dtype=np.intp)
        return np.searchsorted(b, common)
    return np.intersect1d(common, b, return_indices=True)[2]


_ARANGE = np.arange(0, dtype=np.int64)


def arange(n: int) -> np.ndarray:
    """`np.arange(n)` as a read-only view of one shared array (the steps 0..n-1 of every
    series that has them: one copy, not one per rank and pass)."""
    global _ARANGE
    if _ARANGE.size < n:  # views handed out keep the old array
        _ARANGE = np.arange(carry.grown(_ARANGE.size, n), dtype=np.int64)
        _ARANGE.flags.writeable = False
    return _ARANGE[:n]
