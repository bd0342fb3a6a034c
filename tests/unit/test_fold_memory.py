"""What the live fold holds for a long run (issue 30 item 4: <= 250 MB at 1M steps x 8 ranks).

Ground truth from outside the fold: the bytes the folded rows need (rows x 8 bytes for each
column whose values differ), `np.concatenate` of what was appended, and `rolling_mean` over
the whole series. The arrays grow by a sixteenth (doubling, or half, left up to half of each
column empty), and a rolling window's carried sums keep only the rows it reads back.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from test_records_fold import OK, same

from portside.core.checks.records import steps as steps_mod
from portside.core.checks.records.carry import Buf
from portside.core.checks.records.records import RunRecords
from portside.core.checks.records.records_fold import IncrementalRecords
from portside.core.checks.records.series import rolling_mean, smoothed


def held(x: Any, seen: set[int] | None = None) -> int:
    """Bytes of the arrays reachable from x (each buffer once), however the state is kept."""
    seen = set() if seen is None else seen
    if isinstance(x, np.ndarray):
        while isinstance(x.base, np.ndarray):
            x = x.base
        if id(x) in seen:
            return 0
        seen.add(id(x))
        return x.nbytes
    if isinstance(x, dict):
        return sum(held(v, seen) for v in x.values())
    if isinstance(x, list | tuple):
        return sum(held(v, seen) for v in x)
    if isinstance(x, RunRecords) or not type(x).__module__.startswith("portside"):
        return 0
    names = getattr(type(x), "__slots__", ()) or vars(x)
    return sum(held(getattr(x, k), seen) for k in names if hasattr(x, k))


def test_the_fold_leaves_at_most_a_sixteenth_of_its_rows_unused() -> None:
    # Two ranks: their own loss and step time, one reduced gradient norm (shared): five
    # columns of 8-byte values, steps 0..n-1 (the one shared array, not the fold's).
    rng = np.random.default_rng(3)
    live = IncrementalRecords()
    recs: list[dict] = []
    step = 0
    while step < 40_000:
        chunk = []
        for k in range(step, step + int(rng.integers(50, 700))):
            gn = float(rng.random())
            chunk += [{"type": "step", "rank": r, "step": k, "loss": float(rng.random()),
                       "grad_norm": gn, "step_s": float(rng.random())} for r in (0, 1)]
        step += len(chunk) // 2
        live.add(chunk)
        recs += chunk
        need = 5 * 8 * step
        got = live.nbytes - steps_mod._ARANGE.nbytes
        assert need <= got <= need * 17 // 16 + 5 * 8 * 1024, (step, got / need)
    same(live.snapshot(OK, "cand"), RunRecords.from_records(recs, OK, "cand"))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_buffer_grows_by_a_sixteenth(seed: int) -> None:
    rng = np.random.default_rng(seed)
    buf, parts = Buf(np.float64), []
    while buf.n < 60_000:
        part = rng.random(int(rng.integers(1, 3000)))
        buf.extend(part)
        parts.append(part)
        assert buf.a.size - buf.n <= max(buf.n // 16, 1024), (buf.n, buf.a.size)
        assert buf.view().tobytes() == np.concatenate(parts).tobytes()


@pytest.mark.parametrize("holes", [False, True])
@pytest.mark.parametrize("w", [1, 10, 37])
def test_a_rolling_window_carries_only_the_sums_it_reads_back(holes: bool, w: int) -> None:
    # 30,000 steps, the first pass 20,000 of them (a checker that started late), then passes
    # of up to 600: the smoothed series equals rolling_mean over the whole to the bit after
    # every pass (NaN, inf and -0.0 included), and the carried state is the smoothed series
    # itself plus the window and the last pass, not the run's running sums.
    rng = np.random.default_rng(w)
    xs = rng.standard_normal(30_000)
    xs[::97] = -0.0
    if holes:
        xs[rng.integers(0, xs.size, 200)] = np.nan
        xs[rng.integers(0, xs.size, 20)] = np.inf
    live = IncrementalRecords()
    lo, most = 0, 600
    while lo < xs.size:
        hi = min(lo + (20_000 if lo == 0 else int(rng.integers(1, most))), xs.size)
        live.add([{"type": "step", "step": i, "loss": float(xs[i])} for i in range(lo, hi)])
        lo = hi
        snap = live.snapshot()
        assert smoothed(snap, "loss", w).tobytes() == rolling_mean(snap.loss, w).tobytes()
    if w > 1:
        out = 8 * (xs.size + xs.size // 16 + 1024)  # the smoothed series, grown by a 16th
        sums = 2 * 8 * (w + most)  # running sums (and counts): the window and a pass
        assert held(live.by_rank[0].memo) <= out + sums
