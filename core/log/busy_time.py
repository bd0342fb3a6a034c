"""The reviewer's busy time: the union of their attention windows, not the sum.

An ack and a verdict can be open at once (the verdict dialog is opened while an alarm card is
still being read), so summing per-intervention spans counts the same wall second twice. The
ledger and the SQL view ``session_summary`` both count the union; exports keep each window.
"""

from __future__ import annotations

import bisect
import math


class BusyWindows:
    """Disjoint, sorted [start, end) windows; adding one merges what it overlaps."""

    __slots__ = ("_spans",)

    def __init__(self, spans: list[tuple[float, float]] | None = None) -> None:
        self._spans: list[tuple[float, float]] = list(spans or [])

    def add(self, start: float, end: float) -> None:
        # Negative or non-finite spans count nothing (as a single intervention's span does).
        if not (math.isfinite(start) and math.isfinite(end)) or end <= start:
            return
        spans = self._spans
        i = bisect.bisect_left(spans, (start, start))
        if i and spans[i - 1][1] >= start:  # touches the window before
            i -= 1
        j = i
        while j < len(spans) and spans[j][0] <= end:
            start, end = min(start, spans[j][0]), max(end, spans[j][1])
            j += 1
        spans[i:j] = [(start, end)]

    @property
    def seconds(self) -> float:
        return sum(e - s for s, e in self._spans)

    def copy(self) -> BusyWindows:
        return BusyWindows(self._spans)

    # Value semantics: a Ledger (a dataclass) compares its fields, and two folds of the same
    # log must compare equal (replay snapshots are checked against the full fold).
    def __eq__(self, other: object) -> bool:
        return isinstance(other, BusyWindows) and self._spans == other._spans

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"BusyWindows({self._spans!r})"


def union_seconds(windows: list[tuple[float, float]]) -> float:
    busy = BusyWindows()
    for s, e in windows:
        busy.add(s, e)
    return busy.seconds


# The same union in SQL, for the view (one row per session ``s``): each window ordered by
# start adds what lies past the latest end of the windows before it.
HUMAN_S_SQL = """(SELECT COALESCE(SUM(MAX(0, w.d - MAX(w.a, COALESCE(w.pm, w.a)))), 0) FROM
             (SELECT i.attention_started_at AS a, i.decided_at AS d, MAX(i.decided_at) OVER
                (ORDER BY i.attention_started_at, i.seq
                 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS pm
              FROM interventions i WHERE i.session_id = s.session_id AND i.during_replay = 0
                AND i.attention_s > 0) w)"""
