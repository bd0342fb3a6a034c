"""The checks of one pass, in order, and the pass itself.

`run_checks` lines the runs up once (comparison.py), runs every entry of `CHECKS` on that one
`Comparison`, links the consequences to their causes (causes.py), and returns the alarms most
severe first, in `CHECKS` order otherwise. A check is a small function of (comparison,
criteria); its role says how the cause-linking step reads its alarms. A new check is a new
entry here (and its kind in alarms.KINDS).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from portside.core.log.criteria import Criteria

from .acceptance import check_goal_stat
from .alarms import Alarm, sort_alarms
from .batch import check_lr_batch, drift_criteria
from .causes import link_causes
from .clipping import check_clipping
from .data import check_data
from .drift import drift
from .evidence import check_evidence
from .memory import check_memory
from .nonfinite import check_nonfinite
from .optimizer import check_optimizer
from .precision import check_precision
from .ranks import check_rank_average, check_ranks
from .records.comparison import Comparison
from .records.records import RunRecords
from .runtime import check_end, check_fallback, check_hardware, check_recompilation, validate_target
from .slow import check_slow
from .step_count import check_step_count

#: standalone: an alarm of its own; cause: a setting or code change the consequences point at;
#: consequence: what training did (causes.py links them).
Role = Literal["standalone", "cause", "consequence"]


@dataclass(frozen=True)
class Check:
    name: str
    role: Role
    judge: Callable[[Comparison, Criteria], list[Alarm]]


def _final(judge: Callable[[Comparison, Criteria], list[Alarm]],
           ) -> Callable[[Comparison, Criteria], list[Alarm]]:
    """An end-of-run verdict: nothing while the candidate is live."""
    return lambda c, k: judge(c, k) if c.final else []


CHECKS: tuple[Check, ...] = (
    Check("evidence", "standalone", lambda c, k: check_evidence(c.refs, c.cand)),
    Check("end", "standalone", lambda c, k: check_end(c.references, c.cand, k, c.final)),
    Check("non-finite", "standalone", lambda c, k: check_nonfinite(c.refs, c.cand)),
    Check("hardware", "standalone", lambda c, k: check_hardware(c.cand, k, c.target, c.final)),
    # Settings facts before their effects: the drift they cause points at them.
    Check("lr-schedule", "cause", lambda c, k: check_lr_batch(c)),
    Check("clipping", "cause", check_clipping),
    Check("rank-averaging", "cause", lambda c, k: check_rank_average(c)),
    Check("optimizer", "cause", lambda c, k: check_optimizer(c.refs, c.cand, k, c.final)),
    Check("data", "cause", lambda c, k: check_data(c.refs, c.cand, k)),
    Check("precision", "cause", lambda c, k: check_precision(c.refs, c.cand, k)),
    Check("ranks", "cause", lambda c, k: check_ranks(c)),
    Check("recompilation", "standalone", lambda c, k: check_recompilation(c.cand, k)),
    Check("fallback", "standalone", lambda c, k: check_fallback(c.cand, k)),
    Check("slow", "standalone", lambda c, k: check_slow(c.refs, c.cand, k, c.final)),
    Check("memory", "standalone", _final(lambda c, k: check_memory(c.cand, k))),
    Check("step-count", "standalone", lambda c, k: check_step_count(c)),
    Check("drift", "consequence", lambda c, k: drift(c, drift_criteria(c, k))),
    Check("goal", "consequence", _final(lambda c, k: check_goal_stat(c.references, c.cand, k))),
)


def run_checks(references: list[RunRecords], candidate: RunRecords, criteria: Criteria,
               target: str, final: bool) -> list[Alarm]:
    """Every check on the candidate; most severe first. Raises ValueError on an unknown target."""
    validate_target(target)
    refs = [r for r in references if r.n > 0]  # a reference without steps gives no envelope
    c = Comparison(refs, candidate, final, target, references)
    found = [(check.role, check.judge(c, criteria)) for check in CHECKS]
    causes, consequences = link_causes([got for role, got in found if role == "cause"],
                                       [got for role, got in found if role == "consequence"], c)
    linked = {"cause": iter(causes), "consequence": iter(consequences)}  # in CHECKS order
    return sort_alarms([a for role, got in found
                        for a in (got if role == "standalone" else next(linked[role]))])
