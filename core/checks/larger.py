"""The larger-inputs run ([larger] in the criteria): a few steps of the candidate at a bigger
batch or sequence size, judged for what a tiny test misses.

It is no candidate attempt and has no references of its own, so only the checks that stand on
the run itself apply: how it ended (a crash at the bigger size, with its cause: out-of-memory
most often), its peak memory against `[performance] max_memory_fraction`, compilations after
warm-up (a graph per new shape), ops that fell back to the CPU, and its steady step time
against the candidate's it was run after (`[larger] max_step_time_ratio`). Each alarm's title
says it is about the larger run, and its evidence carries the command's variables.
"""

from __future__ import annotations

import dataclasses as dc

import msgspec

from portside.core.log.criteria import Criteria

from .alarms import Alarm, sort_alarms
from .evidence import CpuFallback, Evidence, MemoryPeak, Recompilation, RunEnded, Slow
from .memory import check_memory
from .records.comparison import Comparison
from .records.records import RunRecords
from .runtime import check_end, check_fallback, check_recompilation
from .slow import slow_alarm, steady_step_s


def check_larger(candidate: RunRecords, larger: RunRecords, criteria: Criteria) -> list[Alarm]:
    """The larger run's alarms at its end; most severe first."""
    alone = Comparison([], larger, final=True)  # the run on its own, ended
    alarms = check_end(alone, criteria)
    alarms += check_memory(alone, criteria)
    alarms += check_recompilation(alone, criteria)
    alarms += check_fallback(alone, criteria)
    alarms += _check_step_time(candidate, larger, criteria)
    at = ", ".join(f"{k}={v}" for k, v in criteria.larger.vars) or "larger inputs"
    variables = dict(criteria.larger.vars)
    return sort_alarms([dc.replace(a, title=f"at {at}: {a.title}", evidence=_at(a, variables))
                        for a in alarms])


def _at(a: Alarm, variables: dict[str, str]) -> Evidence:
    """The alarm's evidence with the larger run's variables (`larger`: a field of each kind
    these checks raise)."""
    assert isinstance(a.evidence, RunEnded | MemoryPeak | Recompilation | CpuFallback | Slow), \
        a.kind
    return msgspec.structs.replace(a.evidence, larger=variables)


def _check_step_time(candidate: RunRecords, larger: RunRecords,
                     criteria: Criteria) -> list[Alarm]:
    limit = criteria.larger.max_step_time_ratio
    w = criteria.compile.warmup_steps
    big, small = steady_step_s(larger, w), steady_step_s(candidate, w)
    if not limit or big is None or not small:
        return []
    return slow_alarm(big, small, limit, w, run="larger", base="candidate", key="slow:larger")
