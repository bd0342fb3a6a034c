"""The pass's last step: consequences point at their likely causes.

A check's role (checklist.py) says what its alarms are to the others. Causes are settings and
code the diff can show (the lr schedule and batch, clipping, rank averaging, the optimizer,
data and precision settings, ranks that never reduce); consequences are what training did
(numeric drift, the goal test). Here, once the checks have run: the drift and goal alarms
name the error-level causes (`likely_causes`), and a clipped share that moved with the same
clip configuration is evidence on them (`clip_share`), never a clipping alarm of its own;
ranks that never reduce at all are the cause, not where the clipping sits.
"""

from __future__ import annotations

import dataclasses as dc
from typing import Any

import msgspec

from .alarms import Alarm
from .clipping import clip_share
from .evidence import ClippingChanged, GoalRegression, NumericDrift, TooFewReferences
from .records.comparison import Comparison


def link_causes(causes: list[list[Alarm]], consequences: list[list[Alarm]],
                c: Comparison) -> tuple[list[list[Alarm]], list[list[Alarm]]]:
    """The cause checks' alarms (a before-reduction clipping alarm dropped where the ranks
    diverged) and the consequence checks' alarms with their causes, each list per check."""
    if any(a.kind == "ranks-diverged" for got in causes for a in got):
        causes = [[a for a in got if not (isinstance(a.evidence, ClippingChanged)
                                          and a.evidence.reason == "before-reduction")]
                  for got in causes]
    if not any(consequences):
        return causes, consequences
    extra: dict[str, Any] = {}
    named = sorted({a.kind for got in causes for a in got if a.is_error})
    if named:
        extra["likely_causes"] = named
    share = clip_share(c)
    if share is not None and share.differs:
        extra["clip_share"] = share
    if extra:
        consequences = [[_with(a, extra) for a in got] for got in consequences]
    return causes, consequences


def _with(a: Alarm, extra: dict[str, Any]) -> Alarm:
    """A consequence's alarm naming its causes (`likely_causes`, `clip_share`: fields of the
    drift and goal kinds' evidence)."""
    assert isinstance(a.evidence, NumericDrift | GoalRegression | TooFewReferences), a.kind
    return dc.replace(a, evidence=msgspec.structs.replace(a.evidence, **extra))
