"""The checks of one pass, in order, and the pass itself.

`run_checks` lines the runs up once (records/comparison.py), runs every entry of `CHECKS` on that
one `Comparison`, links the consequences to their causes (causes.py), and returns the alarms most
severe first, in `CHECKS` order otherwise. Every check is a function of (comparison,
criteria) -> alarms (`Judge`); its role says how the cause-linking step reads its alarms. A new
check is a new entry here (and its kind in alarms.KINDS).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from portside.core.log.criteria import Criteria

from .acceptance import check_goal_stat
from .alarms import Alarm, sort_alarms
from .batch import check_lr_batch
from .causes import link_causes
from .clipping import check_clipping
from .data import check_data
from .drift import drift
from .integrity import check_integrity
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

#: What every check is: the pass's lined-up runs and the criteria in, its alarms out. Whether
#: the candidate has ended is `Comparison.final`: an end-of-run verdict returns nothing before.
Judge = Callable[[Comparison, Criteria], list[Alarm]]


@dataclass(frozen=True)
class Check:
    name: str
    role: Role
    judge: Judge


CHECKS: tuple[Check, ...] = (
    Check("integrity", "standalone", check_integrity),
    Check("end", "standalone", check_end),
    Check("non-finite", "standalone", check_nonfinite),
    Check("hardware", "standalone", check_hardware),
    # Settings facts before their effects: the drift they cause points at them.
    Check("lr-schedule", "cause", check_lr_batch),
    Check("clipping", "cause", check_clipping),
    Check("rank-averaging", "cause", check_rank_average),
    Check("optimizer", "cause", check_optimizer),
    Check("data", "cause", check_data),
    Check("precision", "cause", check_precision),
    Check("ranks", "cause", check_ranks),
    Check("recompilation", "standalone", check_recompilation),
    Check("fallback", "standalone", check_fallback),
    Check("slow", "standalone", check_slow),
    Check("memory", "standalone", check_memory),
    Check("step-count", "standalone", check_step_count),
    Check("drift", "consequence", drift),
    Check("goal", "consequence", check_goal_stat),
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
