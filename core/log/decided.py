"""Whether the verdict on the candidate is already decided, and by what.

One rule, two users. The verifier ends a candidate run at once when the rule says its verdict
is decided (core/session/verify.py); the screen, ``verify --json`` and replay show the fact this
module folds from the session's ledger, so they can never disagree with each other or with the
run that was stopped.

The rule: a verdict is decided before the run ends only by what later steps cannot undo, an
alarm of a kind the criteria's ``[stop]`` lists, raised error-level or worse and still open
(an override clears it; so does the final judgement of a run that does not bear it out). Drift
and the goal are judged at the end unless listed. Once the candidate has ended, its outcome
decides; once the session has ended, its verdict does.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from portside.core.log import events as ev
from portside.core.log.criteria import DEFAULT_STOP_ALARMS
from portside.core.log.ledger import AlarmEntry, Ledger, RunEntry

# Shown while nothing is decided: what the run's end still judges (by the kinds not in [stop]).
_AT_END = (("numeric-drift", "drift"), ("goal-regression", "the goal"))


def stops(check: str, severity: str, kinds: Iterable[str]) -> bool:
    """Does this alarm decide the verdict (and so end the candidate run) now?"""
    return ev.is_error_or_worse(severity) and check in tuple(kinds)


def stop_message(check: str, title: str, step: int | None) -> str:
    """The stopped run's error message (run.finished): the agent, the JSON and the fold read it."""
    at = f" at step {step}" if step is not None else ""
    return f"stopped{at}: {check}: {title}"[:500]


def stop_kinds(criteria: Any) -> tuple[str, ...]:
    """[stop] alarms of a session's criteria as logged (session.started); logs from before
    [stop] existed read as the defaults (what those kinds decide did not change)."""
    stop = criteria.get("stop") if isinstance(criteria, dict) else None
    kinds = stop.get("alarms") if isinstance(stop, dict) else None
    if isinstance(kinds, list | tuple) and all(isinstance(k, str) for k in kinds):
        return tuple(kinds)
    return DEFAULT_STOP_ALARMS


@dataclass(frozen=True)
class Decided:
    verdict: str  # "pass" | "fail"; "" while not decided
    by: str  # what decided it; while not decided, what is still judged and when
    run_id: str = ""  # the candidate run it is about
    alarm_id: str = ""  # the alarm that decided it early
    at: float | None = None  # when it was decided (the alarm's or the run's end's ts)
    after_s: float | None = None  # how far into the candidate run that was
    cause: str = ""  # `by` in a few words (the alarm's kind), for a narrow column

    @property
    def decided(self) -> bool:
        return bool(self.verdict)

    def line(self) -> str:
        return f"decided: {self.verdict} — {self.by}" if self.verdict else f"not decided: {self.by}"

    def short(self) -> str:
        what = self.cause or self.by
        return f"decided: {self.verdict} — {what}" if self.verdict else f"not decided: {what}"

    def to_json(self) -> dict[str, Any]:
        return {"decided": self.decided, "verdict": self.verdict or None, "by": self.by,
                "run": self.run_id or None, "alarm": self.alarm_id or None, "at": self.at,
                "after_s": None if self.after_s is None else round(self.after_s, 3),
                "line": self.line()}


def _pending(kinds: tuple[str, ...], goal: bool) -> str:
    left = [name for kind, name in _AT_END
            if kind not in kinds and (kind != "goal-regression" or goal)]
    if not left:
        return "judged at the run's end"
    return " and ".join(left) + " judged at the end"


def decided(ledger: Ledger) -> Decided:
    """The fact at this point of the log (live, replayed, or whole)."""
    started = ledger.started
    criteria = started.criteria if started is not None else {}
    kinds = stop_kinds(criteria)
    goal = bool(((criteria or {}).get("goal") or {}).get("metric"))
    cands = sorted(ledger.candidates(), key=lambda r: r.seq)
    if not cands:
        end = ledger.ended
        if end is not None and end.verdict in ("pass", "fail"):
            return Decided(end.verdict, f"session ended: {end.reason or end.outcome}",
                           at=end.ts)
        return Decided("", "no candidate run yet")
    run = cands[-1]
    errors = [a for a in ledger.open_errors() if a.run_id == run.run_id]
    if run.finished is None:
        first = min((a for a in errors if stops(a.check, a.severity, kinds)),
                    key=lambda a: a.seq, default=None)
        if first is not None:
            return Decided("fail", f"{first.check}: {first.title}", run.run_id,
                           first.alarm_id, first.raised_at, first.raised_at - run.started_at,
                           first.check)
        return Decided("", _pending(kinds, goal), run.run_id)
    return _ended(run, errors, kinds)


def _ended(run: RunEntry, errors: list[AlarmEntry], kinds: tuple[str, ...]) -> Decided:
    fin = run.finished
    assert fin is not None
    after = fin.ts - run.started_at
    if run.stopped:  # decided when its alarm was raised; the run ended right after
        first = min((a for a in errors if stops(a.check, a.severity, kinds)
                     and f": {a.check}: " in fin.error_message), key=lambda a: a.seq,
                    default=None)
        if first is not None:
            return Decided("fail", fin.error_message, run.run_id, first.alarm_id,
                           first.raised_at, first.raised_at - run.started_at,
                           f"{first.check}, run stopped")
        return Decided("fail", fin.error_message or "stopped", run.run_id, at=fin.ts,
                       after_s=after, cause="run stopped")
    if fin.outcome == "passed" and not errors:
        return Decided("pass", "the candidate passed with no error alarm", run.run_id,
                       at=fin.ts, after_s=after, cause="no error alarm")
    if fin.outcome in ("aborted", "running"):
        return Decided("", f"the candidate was {fin.outcome}", run.run_id)
    why = ", ".join(sorted({a.check for a in errors})) or fin.reason or fin.outcome
    return Decided("fail", f"candidate {fin.outcome}: {why}", run.run_id, at=fin.ts,
                   after_s=after, cause=why)
