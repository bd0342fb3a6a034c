"""What the checks remember about one run: its derived facts, and what a live run carries.

`Derived` is one RunRecords' memo (`RunRecords.derived`): series and facts the checks derive
from that run alone (smoothed series, steps per epoch, the clip configuration...), each
computed at most once, because the references are judged again on every live pass. It is not
part of the data: records are treated as immutable once built.

`LiveMemo` is what a live run's snapshots share (records_fold.py hands every snapshot of a
series the same one, as `derived.live`): states over rows that are only ever appended, so a
pass folds only the rows added since the last (carry.py, series.smoothed, drift's verdicts,
the ranks' spreads).

Every slot is declared here, with its type: a new memo is a new field, never a new tuple key.
Nothing is keyed by `id()` of another object: a state that belongs to other runs keeps those
runs and is compared by identity (`same_runs`).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from .records import RunRecords

#: The facts carry.folded keeps, by name (its `arg` tells apart a fact's variants).
Folded = Literal["increasing", "steps_per_epoch", "gap", "has_sums", "clip", "steady",
                 "lr_by_step"]


class FoldKey(NamedTuple):
    what: Folded
    arg: Hashable = None


@dataclass(eq=False)
class LiveMemo:
    """States carried from one pass to the next (module doc). `folds` holds carry.folded's
    (rows covered, state, the other runs it is about); the others are their checks' own
    incremental states."""
    folds: dict[FoldKey, tuple[int, Any, tuple[Any, ...]]] = field(default_factory=dict)
    roll: dict[tuple[Any, ...], dict[str, Any]] = field(default_factory=dict)  # series.smoothed(_median)
    # drift.check_drift: a series' verdict up to k points, with the references it was made of
    drift: dict[Hashable, tuple[int, list[RunRecords]]] = field(default_factory=dict)
    rank_divergence: dict[tuple[Any, ...], dict[str, Any]] = field(default_factory=dict)
    rank_spread: dict[tuple[Any, ...], dict[str, Any]] = field(default_factory=dict)


@dataclass(eq=False)
class Derived:
    """One run's derived facts (module doc). None: not computed yet; a 1-tuple holds a
    computed answer that may itself be None."""
    has: dict[str, bool] = field(default_factory=dict)  # RunRecords.has
    increasing: bool | None = None
    ordered: bool | None = None  # steps sorted (RunRecords.upto)
    cut_of: tuple[RunRecords, int] | None = None  # this run is that one's first k rows
    live: LiveMemo | None = None  # a live snapshot's series memo (records_fold.py)
    carried: LiveMemo | None = None  # any other run's own folds (carry.home)
    progress: np.ndarray | None = None
    steps_per_epoch: dict[bool, dict[int, int]] = field(default_factory=dict)  # by `attempted`
    global_batch: dict[str, dict[str, Any] | None] = field(default_factory=dict)  # by column
    rank_divergence: tuple[dict[str, Any] | None] | None = None
    clip_stats: dict[str, Any] | None = None
    clip_config: dict[str, Any] | None = None
    steady: dict[tuple[int, int], float | None] = field(default_factory=dict)  # (warmup, n)
    smooth: dict[tuple[Any, ...], np.ndarray] = field(default_factory=dict)  # (series, window[, how])
    noise: dict[tuple[Any, ...], np.ndarray] = field(default_factory=dict)  # +gap[, log]
    gap: dict[str, int] = field(default_factory=dict)
    least: dict[str, float] = field(default_factory=dict)  # a series' least finite value
    # drift_rate calibrations over the reference set this run heads, with that set (a
    # drift_rate.Calibration or None: Any here, so the floor names no check even as a type)
    drift_cal: dict[Hashable, tuple[list[RunRecords], Any]] = field(default_factory=dict)

    def without_lr(self) -> Derived:
        """The facts that do not depend on the learning rate, for a copy of the run with its
        lr scaled (checks/batch.py): the lr facts and the carried folds start afresh."""
        return Derived(has=dict(self.has), increasing=self.increasing, ordered=self.ordered,
                       progress=self.progress, steps_per_epoch=dict(self.steps_per_epoch))


def same_runs(kept: Sequence[Any], runs: Sequence[Any]) -> bool:
    """The very runs a state was made of (identity, not equality: records have no value)."""
    return len(kept) == len(runs) and all(a is b for a, b in zip(kept, runs, strict=True))
