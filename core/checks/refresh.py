"""When an open alarm's evidence is worth recording again (``alarm.updated``).

A live candidate is judged about once a second; an alarm raised early (a changed ``max_norm``
shows at the first clipped step) keeps its key on every later pass while its evidence grows:
shares over more steps, longer series. Recorded as raised, the evidence would describe the
first step for the whole session ("the reference clips 0% of 1 steps" while it clips on 30%).
Recording it on every pass would flood the log instead, so an update is due when the evidence
differs from the last recorded one and the run has gone on since: at least
:data:`REFRESH_S` seconds and :data:`REFRESH_GROWTH` times the steps it covered (updates thin
out as a run grows: at most about 60 per alarm over a million steps). The final pass, once the run has
ended, records any difference: the evidence a session ends with covers the whole run.
"""

from __future__ import annotations

import dataclasses as dc
from dataclasses import dataclass

from .alarms import Alarm

__all__ = ["REFRESH_GROWTH", "REFRESH_S", "EvidenceRefresh"]

REFRESH_S = 5.0
REFRESH_GROWTH = 1.25


@dataclass
class _Recorded:
    alarm_id: str
    alarm: Alarm
    step: int | None
    t: float


class EvidenceRefresh:
    """The evidence last recorded for each alarm of one run, by ``Alarm.key``."""

    def __init__(self) -> None:
        self._last: dict[str, _Recorded] = {}

    def recorded(self, alarm: Alarm, alarm_id: str, step: int | None, now: float) -> None:
        """``alarm`` was raised as ``alarm_id`` with evidence up to ``step``."""
        self._last[alarm.key] = _Recorded(alarm_id, alarm, step, now)

    def alarm_id(self, key: str) -> str | None:
        """The id the alarm of this key was raised as (None: not recorded here)."""
        last = self._last.get(key)
        return last.alarm_id if last is not None else None

    def due(self, alarm: Alarm, step: int | None, now: float,
            final: bool) -> tuple[str, Alarm] | None:
        """(alarm id, the alarm as it now stands) when ``alarm``'s evidence is due to be
        recorded again, else None. The severity stays the raised one: an update refreshes what
        the alarm shows, never what it counts for."""
        last = self._last.get(alarm.key)
        if last is None:
            return None
        if alarm.wire == last.alarm.wire and alarm.title == last.alarm.title:
            return None
        if not final:
            if now - last.t < REFRESH_S:
                return None
            if step is None or (last.step is not None and step < last.step * REFRESH_GROWTH):
                return None
        now_alarm = dc.replace(alarm, severity=last.alarm.severity)
        self._last[alarm.key] = _Recorded(last.alarm_id, now_alarm, step, now)
        return last.alarm_id, now_alarm
