"""Issue 41.10: `too-few-references` was raised on every run of a correct port, the same words
each time, where nothing between the runs could change it. The verifier publishes such
session-level advice once; a run's own alarms are still published per run."""

from __future__ import annotations

from pathlib import Path

from portside.core.checks.alarms import Alarm
from portside.core.log import events as ev
from portside.core.log.bus import EventBus
from portside.core.log.criteria import Criteria
from portside.core.session.verify import Verifier


def test_too_few_references_is_said_once_a_session(tmp_path: Path) -> None:
    published: list[ev.Event] = []
    bus = EventBus(None)
    bus.subscribe(published.append)
    v = Verifier(bus, "s1", Criteria(), "cpu", tmp_path)
    advice = Alarm("too-few-references", "warning", "run 5 references (--reference-runs 5)")
    first = v._raise(advice, "cand1")
    again = v._raise(Alarm("too-few-references", "warning", advice.title), "cand2")
    v._raise(Alarm("clipping-changed", "error", "max_norm changed"), "cand1")
    v._raise(Alarm("clipping-changed", "error", "max_norm changed"), "cand2")
    raised = [e for e in published if isinstance(e, ev.AlarmRaised)]
    assert [e.check for e in raised].count("too-few-references") == 1  # type: ignore[attr-defined]
    assert [e.check for e in raised].count("clipping-changed") == 2  # type: ignore[attr-defined]
    assert again == first
    # other advice (another number of references) is news: said
    v._raise(Alarm("too-few-references", "warning", "run 7 references"), "cand3")
    raised = [e for e in published if isinstance(e, ev.AlarmRaised)]
    assert [e.check for e in raised].count("too-few-references") == 2  # type: ignore[attr-defined]
