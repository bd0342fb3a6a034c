"""The candidate beside the references (issue 30): `verify` starts it while references still
run, judges it as each valid one ends, and reaches the verdict one-after-another reaches.

Whole verify sessions (the real engine, Runner, probe and checks) of
tests/fixtures/trainers/train_tiny.py. Beside the references, the second one (seed offset 1,
which the runner hands every run as PORTSIDE_SEED_OFFSET) waits until the candidate's process
has ended (the candidate's command leaves a file), so the candidate surely runs and ends while
only the first reference is in. Overlap is judged from the event log's own timestamps; the
order one after another is the same training with `[hosts] parallel = 1` or
`overlap = false`.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
from doubles import MemorySink

from portside.core.log import events as ev
from portside.core.log.criteria import parse_criteria
from portside.core.log.ledger import fold
from portside.core.replay.index import SequenceSource
from portside.core.replay.player import Replayer
from portside.core.replay.state import fold as replay_fold
from portside.core.session.config import SessionConfig
from portside.core.session.engine import SessionEngine

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "trainers" / "train_tiny.py"
TRAIN = f"{shlex.quote(sys.executable)} {TINY} --steps 30"
LATE_S = 4.0  # the second reference's head start for the candidate, where it does not wait

pytestmark = pytest.mark.skipif((os.cpu_count() or 1) < 2,
                                reason="two runs at once need two cores")


def _reference(first: str, second: str, after: Path | None = None) -> str:
    """The first reference runs `first`; the second runs `second` once the file `after`
    exists (at most a minute: never a hang), or, without one, LATE_S after it started."""
    wait = (f"i=0; while [ ! -e {after} ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done"
            if after else f"sleep {LATE_S}")
    return f'if [ "$PORTSIDE_SEED_OFFSET" = 1 ]; then {wait}; {second}; else {first}; fi'


def _leaving(command: str, flag: Path) -> str:
    """`command`, then the file `flag` (its exit status kept)."""
    return f"{command}; s=$?; touch {flag}; exit $s"


def _verify(tmp: Path, name: str, criteria: str, reference: str,
            candidate: str) -> tuple[Any, list[ev.Event]]:
    sink = MemorySink()
    config = SessionConfig(project=tmp, target="cpu", reference_command=reference,
                           candidate_command=candidate,
                           criteria=parse_criteria(criteria, f"{name}.toml"),
                           reference_runs=2, timeout_s=180, stall_s=60, workdir=tmp / name,
                           mode="verify", policy="auto")
    result = asyncio.run(SessionEngine(config, sink).run())
    return result, sink.events


def _runs(events: list[ev.Event]) -> dict[str, tuple[ev.RunStarted, ev.RunFinished]]:
    """role + attempt ("reference1", "candidate1") -> its started and finished events."""
    started = {e.run_id: e for e in events if isinstance(e, ev.RunStarted)}
    return {f"{started[e.run_id].role}{started[e.run_id].attempt}": (started[e.run_id], e)
            for e in events if isinstance(e, ev.RunFinished)}


def _standing(events: list[ev.Event]) -> list[tuple[str, str, str]]:
    """The alarms the folded log ends with (cleared ones gone): (check, severity, run)."""
    ledger = fold(events)
    role = {e.run_id: f"{e.role}{e.attempt}" for e in events if isinstance(e, ev.RunStarted)}
    return sorted((a.check, a.severity, role.get(a.run_id, "")) for a in ledger.open_alarms())


PAR = "[hosts]\nparallel = 2\n"


@pytest.fixture(scope="module")
def clipped(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A candidate that clips at 0.05 (clipping-changed, numeric-drift): beside the
    references and one after another."""
    tmp = tmp_path_factory.mktemp("clipped")
    flag = tmp / "candidate-ended"
    ref, cand = _reference(TRAIN, TRAIN, flag), _leaving(f"{TRAIN} --max-norm 0.05", flag)
    beside = _verify(tmp, "beside", PAR, ref, cand)
    # The same commands: the file is there now, so the second reference no longer waits.
    return {"beside": beside, "after": _verify(tmp, "after", "[hosts]\nparallel = 1\n", ref, cand)}


@pytest.mark.slow  # two verify sessions of three real torch runs each
def test_the_candidate_starts_before_the_last_reference_ends(clipped: dict[str, Any]) -> None:
    _, events = clipped["beside"]
    runs = _runs(events)
    ref1, ref2, cand = runs["reference1"], runs["reference2"], runs["candidate1"]
    # Two slots (parallel = 2): both references at once, the candidate in the first one freed.
    assert ref2[0].ts < ref1[1].ts
    assert ref1[1].ts <= cand[0].ts < ref2[1].ts, (ref1[1].ts, cand[0].ts, ref2[1].ts)
    # It was judged before the second reference ended: an alarm on it in between.
    early = [e for e in events if isinstance(e, ev.AlarmRaised)
             and e.run_id == cand[0].run_id and e.ts < ref2[1].ts]
    assert early, "no live alarm against the first reference"
    # ... and its verdict came after: its run.finished follows the last reference's.
    assert cand[1].seq > ref2[1].seq
    # Replay seeks through the interleaved log: at the candidate's start both it and the
    # second reference are running, the first has ended; at the end, the session's verdict.
    player = Replayer(SequenceSource(events), snapshot_every=16)
    then = player.state_at(cand[0].seq)
    assert then == replay_fold(e for e in events if e.seq <= cand[0].seq)
    assert {r.role + str(r.attempt): r.outcome for r in then.runs.values()} == \
        {"reference1": "passed", "reference2": "running", "candidate1": "running"}
    assert player.state_at(events[-1].seq).verdict == clipped["beside"][0].verdict
    # One after another, the candidate starts after both references ended.
    _, after = clipped["after"]
    runs = _runs(after)
    assert runs["candidate1"][0].ts >= max(runs["reference1"][1].ts, runs["reference2"][1].ts)


@pytest.mark.slow  # two verify sessions of three real torch runs each
def test_same_verdict_and_alarms_as_one_after_another(clipped: dict[str, Any]) -> None:
    (beside, b_events), (after, a_events) = clipped["beside"], clipped["after"]
    assert (beside.verdict, beside.outcome) == (after.verdict, after.outcome) == \
        ("fail", "failed-silent")
    standing = _standing(b_events)
    assert standing == _standing(a_events)
    assert ("clipping-changed", "error", "candidate1") in standing  # max_norm 0.05 vs 1.0
    # What the verifier reported is what the log folds to.
    assert sorted(a.kind for a in beside.candidates[0].alarms) == \
        sorted(a.kind for a in after.candidates[0].alarms)
    assert {a.kind for a in beside.candidates[0].alarms} == {c for c, _, r in standing
                                                            if r == "candidate1"}
    assert [r.outcome for r in beside.references] == ["passed", "passed"]


@pytest.mark.slow  # a verify session of three real torch runs
def test_a_late_only_valid_reference_still_judges_the_candidate(tmp_path: Path) -> None:
    """The first reference fails at once; the second, the only valid one, ends after the
    candidate's last step: the candidate waits for it and is judged against it."""
    flag = tmp_path / "candidate-ended"
    result, events = _verify(tmp_path, "late", PAR, _reference("exit 3", TRAIN, flag),
                             _leaving(f"{TRAIN} --max-norm 0.05", flag))
    runs = _runs(events)
    ref2, cand = runs["reference2"], runs["candidate1"]
    assert runs["reference1"][1].outcome == "failed-error" and ref2[1].outcome == "passed"
    last_step = max(e.ts for e in events if isinstance(e, ev.RunRecord)
                    and e.run_id == cand[0].run_id)
    assert last_step < ref2[1].ts, "the candidate had not ended before its reference"
    alarms = [e for e in events if isinstance(e, ev.AlarmRaised) and e.run_id == cand[0].run_id]
    # Judged against it: a clipping change only a reference shows, and never "no reference".
    assert "clipping-changed" in {a.check for a in alarms}
    assert all(a.ts > ref2[1].ts for a in alarms)
    assert not [a for a in alarms if a.check == "reference-failed"]
    assert cand[1].seq > ref2[1].seq and result.verdict == "fail"


@pytest.mark.slow  # two verify sessions, each with a real torch candidate
def test_every_reference_failing_ends_as_today(tmp_path: Path) -> None:
    ref = _reference("exit 3", "exit 4")
    beside, b_events = _verify(tmp_path, "beside", PAR, ref, TRAIN)
    after, a_events = _verify(tmp_path, "after", PAR + "overlap = false\n", ref, TRAIN)
    runs = _runs(b_events)
    assert runs["candidate1"][0].ts < runs["reference2"][1].ts  # it did start beside them
    runs = _runs(a_events)
    assert runs["candidate1"][0].ts > runs["reference2"][1].ts  # overlap = false: after
    assert (beside.verdict, beside.outcome, beside.reason) == \
        (after.verdict, after.outcome, after.reason) == \
        ("fail", "failed-silent", "reference-failed")
    assert _standing(b_events) == _standing(a_events) == [
        ("reference-failed", "error", "candidate1"), ("reference-failed", "error", "reference1"),
        ("reference-failed", "error", "reference2")]
    # The candidate trained to its end all the same, as it does today.
    assert beside.candidates[0].records.n == after.candidates[0].records.n == 30


FULLSIZE = Path(__file__).resolve().parents[1] / "bench" / "fullsize_trainer.py"


def _synthetic(drift_at: int, seed: int) -> str:
    """300 steps of the full-size bench's torch-free trainer; its loss is 1.3x from drift_at."""
    return f"{shlex.quote(sys.executable)} -S {FULLSIZE} 300 1 0 {drift_at} {seed}"


@pytest.mark.slow  # four runs and a 2 s wait, twice over: ~8 s
def test_an_alarm_only_the_first_reference_supports_is_cleared(tmp_path: Path) -> None:
    """The first reference's loss is plain, the second's 1.3x, as is the candidate's: against
    the first alone the candidate drifts; against both it is inside their envelope. Beside the
    references the drift alarm is raised live, then cleared when the second ends, and the
    candidate's alarms are those one after another gives (no drift raised there at all)."""
    from portside.core.log.bus import EventBus
    from portside.core.session.verify import Verifier

    flag = tmp_path / "candidate-ended"
    # The second reference starts 2 s after the candidate ended: a live pass (one a second)
    # judges the whole candidate against the first alone.
    ref = _reference(_synthetic(10**6, 1), f"sleep 2; {_synthetic(0, 2)}", flag)
    cand = _leaving(_synthetic(0, 3), flag)

    def verify(beside: bool) -> tuple[Any, list[ev.Event]]:
        sink = MemorySink()
        v = Verifier(EventBus(sink), "clear", parse_criteria(PAR, "c.toml"), "cpu",
                     tmp_path / f"probe{beside}", stall_s=60.0, timeout_s=120)

        async def go() -> Any:
            if beside:
                refs = v.start_references(2, ref, tmp_path)
                report = await v.run_candidate(cand, tmp_path)
                await refs
                return report
            await v.run_references(2, ref, tmp_path)  # the file is there: no wait
            return await v.run_candidate(cand, tmp_path)

        return asyncio.run(go()), sink.events

    report, events = verify(True)
    raised = [e for e in events if isinstance(e, ev.AlarmRaised) and e.check == "numeric-drift"]
    assert raised, "no drift against the first reference alone"
    ref2_end = max(e.ts for e in events if isinstance(e, ev.RunFinished)
                   and e.run_id.startswith("ref2-"))
    assert all(e.ts < ref2_end for e in raised)
    cleared = {e.alarm_id: e for e in events if isinstance(e, ev.AlarmCleared)}
    assert {e.alarm_id for e in raised} <= set(cleared)
    assert all(e.ts >= ref2_end and "2 valid references" in e.reason for e in cleared.values())
    after, after_events = verify(False)
    assert not [e for e in after_events if isinstance(e, ev.AlarmRaised)
                and e.check == "numeric-drift"]
    assert sorted(a.key for a in report.alarms) == sorted(a.key for a in after.alarms)
    assert report.outcome == after.outcome == "passed"
    assert not [a for a in fold(events).open_alarms() if a.check == "numeric-drift"]


def test_a_stop_while_the_candidate_waits_for_its_slot_starts_no_candidate(tmp_path: Path
                                                                           ) -> None:
    """Both slots held by references, the reviewer stops the session: the references are
    aborted and the queued candidate never starts, as when it waited for every reference."""
    sink = MemorySink()
    config = SessionConfig(project=tmp_path, target="cpu", reference_command="sleep 60",
                           candidate_command="echo candidate", reference_runs=2,
                           criteria=parse_criteria(PAR, "c.toml"), timeout_s=120,
                           workdir=tmp_path / "w", mode="verify", policy="auto")
    engine = SessionEngine(config, sink)

    async def go() -> Any:
        session = asyncio.ensure_future(engine.run())
        for _ in range(600):  # both references under way (each has its run.started)
            if len([e for e in sink.events if isinstance(e, ev.RunStarted)]) == 2:
                break
            await asyncio.sleep(0.05)
        engine.stop("stopped by the reviewer")
        return await asyncio.wait_for(session, 60)

    result = asyncio.run(go())
    assert [e.role for e in sink.events if isinstance(e, ev.RunStarted)] == \
        ["reference", "reference"]
    assert [e.outcome for e in sink.events if isinstance(e, ev.RunFinished)] == \
        ["aborted", "aborted"]
    assert (result.verdict, result.reason, result.candidates) == \
        ("fail", "stopped by the reviewer", [])
