"""Issue 37: an alarm the live checks raise on part of a run and the final judgement over the
whole run does not bear out is withdrawn, visibly (an `alarm.cleared` with its reason). The
real Verifier, runner, probe and checks on a loop that reads one batch ahead, as accelerate's
DataLoaderShard does: its first step's record carries two batches, so the live checks see a
doubled global batch; over the run the batch is the reference's."""

from __future__ import annotations

import asyncio
import shlex
import sys
from pathlib import Path

import pytest
from doubles import MemorySink

from portside.core.log import events as ev
from portside.core.log.bus import EventBus
from portside.core.log.criteria import parse_criteria
from portside.core.log.ledger import fold
from portside.core.session.verify import Verifier

TRAINER = Path(__file__).resolve().parents[1] / "fixtures" / "trainers" / "train_read_ahead.py"
CMD = f"{shlex.quote(sys.executable)} {TRAINER}"
CRITERIA = """
[goal]
metric = "accuracy"
pattern = 'accuracy (?P<value>[0-9.]+)'
direction = "max"
tolerance = 0.05
"""


@pytest.mark.slow  # three short real runs, one of them paused 3 s
def test_a_live_batch_alarm_the_whole_run_does_not_confirm_is_withdrawn(tmp_path: Path) -> None:
    sink = MemorySink()
    v = Verifier(EventBus(sink), "withdraw", parse_criteria(CRITERIA, "c.toml"), "cpu",
                 tmp_path / "runs", stall_s=60.0, timeout_s=120)

    async def go():  # type: ignore[no-untyped-def]
        await v.run_references(2, CMD, tmp_path)
        return await v.run_candidate(f"{CMD} --read-ahead --pause 3", tmp_path)

    report = asyncio.run(go())
    events = sink.events
    raised = [e for e in events if isinstance(e, ev.AlarmRaised)
              and e.check == "global-batch-changed"]
    assert raised and raised[0].severity == "error", "the first step alone: a doubled batch"
    cleared = {e.alarm_id: e for e in events if isinstance(e, ev.AlarmCleared)}
    assert raised[0].alarm_id in cleared  # before issue 37: it stood, and failed the port
    assert "final judgement over the whole run does not confirm" in \
        cleared[raised[0].alarm_id].reason
    # by the final pass, which comes before the candidate's run.finished
    at = events.index(cleared[raised[0].alarm_id])
    (fin,) = [e for e in events[at:] if isinstance(e, ev.RunFinished)]
    assert fin.run_id == raised[0].run_id
    assert not [a for a in report.alarms if a.kind == "global-batch-changed"]
    assert report.outcome == "passed", [a.title for a in report.alarms]
    assert not [a for a in fold(events).open_alarms() if a.check == "global-batch-changed"]
