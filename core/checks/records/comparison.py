"""How the candidate lines up with the references: decided once per pass, read by every check.

The checks compare the same runs the same way: by step index, or by training progress where
the steps per epoch differ (alignment.py); each reference paired with the candidate; the
global batch ratio (of each run's global batch, facts.py); the references cut at the
candidate's last step (a live run compares like with like); the candidate with its learning
rate scaled by that ratio. A `Comparison` states each of these once, computed when first asked
(most passes need only some), so no check decides an alignment of its own and no fact is
derived twice in a pass. What belongs to one run alone is that run's memo (memo.py), kept from
pass to pass.
"""

from __future__ import annotations

import dataclasses as dc
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from .alignment import Alignment, aligned, by_progress, map_to
from .facts import global_batch, has_progress, steps_per_epoch
from .records import RunRecords
from .series import common_steps

BATCH_RTOL = 0.02  # medians of whole batches: only a real change moves them


@dataclass(eq=False)
class Pairing:
    """The candidate against one reference (`index`: its place among the references, where a
    carried fact of the pair is kept)."""
    cand: RunRecords
    ref: RunRecords
    index: int = 0

    @cached_property
    def progress_known(self) -> bool:
        """Both runs report their training progress."""
        return has_progress(self.cand) and has_progress(self.ref)

    @cached_property
    def per_epoch_differs(self) -> bool:
        """Their step records per epoch differ (GradScaler-skipped steps not counted)."""
        return steps_per_epoch(self.cand) != steps_per_epoch(self.ref)

    @cached_property
    def by_progress(self) -> bool:
        return by_progress(self.cand, [self.ref])

    @cached_property
    def progress_map(self) -> np.ndarray:
        """alignment.map_to: each candidate record's reference record of the same progress."""
        return map_to(self.cand, self.ref)

    @cached_property
    def common(self) -> tuple[np.ndarray, list[slice | np.ndarray]]:
        """The steps both runs have, and each one's selector of them."""
        return common_steps([self.cand, self.ref])

    @cached_property
    def alignment(self) -> Alignment:
        by = self.by_progress
        return aligned(self.cand, [self.ref], by, [self.progress_map] if by else [])

    def of(self, cand: RunRecords) -> Pairing:
        """This pairing for a copy of the candidate with other learning rates: every fact
        here is about steps and progress, none about the lr, so those computed are kept."""
        out = Pairing(cand, self.ref, self.index)
        out.__dict__.update({k: v for k, v in self.__dict__.items() if k not in _FIELDS})
        return out


_FIELDS = {"cand", "ref", "index"}


@dataclass(eq=False)
class Comparison:
    """One pass's view of the runs (module doc). `refs` are the references judged against
    (those with steps, in a pass); `references` all of them, for the verdicts that count a
    reference without steps too (a failed reference run, the goal test)."""
    refs: list[RunRecords]
    cand: RunRecords
    final: bool = False
    target: str = ""
    references: list[RunRecords] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.references:
            self.references = self.refs

    @cached_property
    def by_progress(self) -> bool:
        """The whole set lines up by training progress (else by step index)."""
        return by_progress(self.cand, self.refs)

    @cached_property
    def pairings(self) -> list[Pairing]:
        return [Pairing(self.cand, r, i) for i, r in enumerate(self.refs)]

    @cached_property
    def alignment(self) -> Alignment:
        """The points every run has: the candidate's selector first, then each reference's."""
        by = self.by_progress
        return aligned(self.cand, self.refs, by,
                       [p.progress_map for p in self.pairings] if by else [])

    @cached_property
    def batch(self) -> tuple[float, dict[str, Any], dict[str, Any]] | None:
        """(candidate / reference global batch, both batches) when they differ; else None. The
        DataLoader's figure where every run has one, else the batch the steps consumed (the
        two are not mixed: a loss over tokens consumes batch × sequence rows). About the set
        of runs, not one run: here, not in facts.py (the global batch of each run is there)."""
        refs = [r for r in self.refs if r.n]
        for column in ("samples", "consumed"):
            cb = global_batch(self.cand, column)
            rbs = [b for r in refs if (b := global_batch(r, column)) is not None]
            if cb is not None and len(rbs) == len(refs) and rbs:
                break
        else:
            return None
        rb = rbs[0]
        k = cb["global"] / rb["global"]
        if abs(k - 1.0) <= BATCH_RTOL:
            return None
        return k, cb, rb

    @cached_property
    def cuts(self) -> list[RunRecords]:
        """The references cut at the candidate's last step (all of them without steps)."""
        if self.cand.n == 0:
            return list(self.refs)
        last = int(self.cand.steps.max())
        return [r.upto(last) for r in self.refs]

    def scaled_lr(self, factor: float) -> Comparison:
        """The same comparison with the candidate's learning rates divided by `factor` (a
        batch-scaled lr judged against the references' schedule: checks/batch.py)."""
        c = self.cand
        scaled = dc.replace(c, lr=c.lr / factor, lr_all=c.lr_all / factor)
        scaled.derived = c.derived.without_lr()
        out = Comparison(self.refs, scaled, self.final, self.target, self.references)
        out.pairings = [p.of(scaled) for p in self.pairings]
        return out
