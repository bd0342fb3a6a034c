"""One candidate run judged while it runs and at its end (``Verifier.run_candidate``).

Its records reach the judge straight from the runner (``on_records``), are folded into live
arrays and judged at most once a second against the valid references in so far; each
reference that ends later widens the envelope. What the checks find is raised once and its
evidence refreshed; what fewer references raised and all of them do not is cleared once all
are in; at the end, what only part of the run bore out is withdrawn; an alarm ``[stop]``
names ends the run at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from portside.core.checks import Alarm, RunRecords, run_checks, sort_alarms
from portside.core.checks.evidence import ReferenceFailed, ReferenceRun
from portside.core.checks.records.records_fold import IncrementalRecords
from portside.core.checks.refresh import EvidenceRefresh
from portside.core.log import events as ev
from portside.core.log.decided import stop_message, stops
from portside.core.log.ledger import STOPPED
from portside.core.session.outcome import run_end

if TYPE_CHECKING:
    from portside.core.run.runner import RunResult, RunSpec
    from portside.core.session.run_slots import RunSlots
    from portside.core.session.verify import Verifier

LIVE_CHECK_S = 1.0
LIVE_CHECK_IDLE = 19  # seconds idle per second judging: ≤ 5% of a core


@dataclass
class LiveCheckStats:
    """What the live checker cost (the last candidate run): benchmarks and diagnostics."""
    passes: int = 0
    records: int = 0  # folded
    cpu_s: float = 0.0  # this thread's CPU in fold + checks
    check_cpu_s: float = 0.0  # of which the checks (what paces the passes)
    fold_s: float = 0.0  # wall, folding
    check_s: float = 0.0  # wall, run_checks
    last_pass_s: float = 0.0
    max_pass_s: float = 0.0
    max_pass_cpu_s: float = 0.0


class CandidateRun:
    """The live fold, the judge and its memory of what it raised, for one candidate run.

    Made once the candidate has its slot: the references valid by then are its first
    envelope. The verifier lends it the bus, the runner and the references."""

    def __init__(self, verifier: Verifier, spec: RunSpec) -> None:
        self.verifier = verifier
        self.spec = spec
        self.refs = verifier.valid_references()
        self.raised: dict[str, Alarm] = {}
        # key -> alarm id: raised before every reference was in
        self.provisional: dict[str, str] = {}
        self.live_keys: set[str] = set()  # raised on a partial run: the final pass confirms them
        self.pending: list[dict[str, Any]] = []  # records not yet folded into `live`
        self.live = IncrementalRecords()
        self.stats = verifier.live_stats = LiveCheckStats()
        self.stopped_by: tuple[Alarm, int | None] | None = None  # [stop]: the alarm that decided it
        self.dirty = asyncio.Event()
        self.all_in: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.refresh = EvidenceRefresh()
        if verifier._refs_pending:
            verifier._on_reference.append(self.reference_ended)
        else:
            self.all_in.set_result(None)
            if not self.refs:
                self.no_reference()

    async def run(self, slots: RunSlots | None) -> tuple[RunResult, RunRecords, list[Alarm]]:
        """Run it, judging live; its result, its records and its alarms once judged whole.
        Its slot beside the references (``slots``) is given back as soon as it ends."""
        verifier, spec = self.verifier, self.spec
        verifier.current_run = spec.run_id
        checker = asyncio.create_task(self.live_checks())
        try:
            try:
                result = await verifier._run_folding(spec, self.on_records)
            finally:
                if slots is not None:
                    slots.release()
            if self.stopped_by and result.reason == "aborted":  # ended by [stop], not by a person
                alarm, at_step = self.stopped_by
                result.reason, result.error_type = STOPPED, "Stopped"
                result.error_message = stop_message(alarm.kind, alarm.title, at_step)
            if result.reason not in ("aborted", STOPPED):
                await self.all_in  # the live checks go on judging the whole run as references end
        finally:
            checker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await checker
            verifier.current_run = None
            if self.reference_ended in verifier._on_reference:
                verifier._on_reference.remove(self.reference_ended)
        # Every record went through on_records into the fold, which equals a rebuild from them
        # (tests/unit/test_records_fold.py).
        self.fold()
        final = self.live.snapshot(run_end(result, spec.stall_s), spec.run_id)
        if result.reason not in ("aborted", STOPPED):  # a stopped run's alarms decided it
            self.judge(final, final=True)
        return result, final, sort_alarms(list(self.raised.values()))

    # -- the references coming in -------------------------------------------------------------

    def no_reference(self) -> None:
        alarm = self.raised["reference-failed:none"] = Alarm(
            "reference-failed", "error",
            "no valid reference run to judge the candidate against",
            ReferenceFailed(references=[ReferenceRun(run=r.run_id, outcome=r.outcome,
                                                     steps=r.records.n)
                                        for r in self.verifier.references]),
            key="reference-failed:none")
        self.verifier._raise(alarm, self.spec.run_id)

    def reference_ended(self) -> None:
        self.refs[:] = self.verifier.valid_references()
        self.dirty.set()
        if not self.verifier._refs_pending and not self.all_in.done():
            self.all_in.set_result(None)
            if not self.refs:
                self.no_reference()

    # -- the live fold --------------------------------------------------------------------------

    def on_records(self, recs: list[dict[str, Any]]) -> None:
        self.pending.extend(recs)
        self.dirty.set()

    def fold(self) -> None:
        batch = self.pending[:]
        del self.pending[:]
        self.live.add(batch)

    async def live_checks(self) -> None:
        # Judge partial series while the run is live, at most once a second and the checks
        # never more than ~5% of a core (paced by this thread's CPU time: on a busy machine the
        # wall time of a pass says more about the neighbours). New records are folded
        # into the arrays (O(new)); the checks then run on a snapshot of them.
        stats = self.stats
        while True:
            await self.dirty.wait()
            self.dirty.clear()
            if not self.pending and not self.live.count:
                continue  # a reference ended before the candidate's first record
            t0, c0 = time.perf_counter(), time.thread_time()
            self.fold()
            t1, c1 = time.perf_counter(), time.thread_time()
            self.judge(self.live.snapshot(None, self.spec.run_id), final=False)
            t2, c2 = time.perf_counter(), time.thread_time()
            stats.passes += 1
            stats.records = self.live.count
            cpu, check_cpu = c2 - c0, c2 - c1
            stats.cpu_s += cpu
            stats.check_cpu_s += check_cpu
            stats.max_pass_cpu_s = max(stats.max_pass_cpu_s, cpu)
            stats.fold_s += t1 - t0
            stats.check_s += t2 - t1
            stats.last_pass_s = t2 - t0
            stats.max_pass_s = max(stats.max_pass_s, t2 - t0)
            # Paced by the checks' CPU alone: the fold costs the same per record whenever
            # it runs (folding later only piles records up in memory), and counting it
            # would make a fast run's passes ever rarer (a longer sleep, a larger batch).
            await asyncio.sleep(max(LIVE_CHECK_S, LIVE_CHECK_IDLE * check_cpu))

    # -- the judge ------------------------------------------------------------------------------

    def judge(self, records: RunRecords, final: bool) -> None:
        if not self.refs and not self.all_in.done():
            return  # nothing to judge against yet: the first valid reference starts it
        verifier = self.verifier
        step = int(records.steps.max()) if records.n else None
        now = time.monotonic()
        found = run_checks(self.refs, records, verifier.criteria, verifier.target, final)
        if self.all_in.done() and self.provisional:
            self.clear_provisional(found)
        if final and self.live_keys:
            self.withdraw(found)
        for alarm in found:
            if alarm.key not in self.raised:
                self.raised[alarm.key] = alarm
                alarm_id = verifier._raise(alarm, self.spec.run_id)
                self.refresh.recorded(alarm, alarm_id, step, now)
                if not self.all_in.done():
                    self.provisional[alarm.key] = alarm_id
                if not final:
                    self.live_keys.add(alarm.key)
            elif (due := self.refresh.due(alarm, step, now, final)) is not None:
                alarm_id, self.raised[alarm.key] = due
                verifier.bus.publish(self.raised[alarm.key].updated(verifier.session_id,
                                                                    alarm_id, step))
        if not final:
            self.stop_if_decided(found, step)

    def clear_provisional(self, found: list[Alarm]) -> None:
        """Every reference is in: what fewer of them raised and all of them do not was the
        narrower envelope's, not the candidate's."""
        keep = {a.key for a in found}
        for key, alarm_id in self.provisional.items():
            if key not in keep:
                del self.raised[key]
                self.verifier.bus.publish(ev.AlarmCleared(
                    session_id=self.verifier.session_id, alarm_id=alarm_id,
                    reason=f"by all {len(self.refs)} valid references (raised while only "
                           "some were in)"))
        self.provisional.clear()

    def withdraw(self, found: list[Alarm]) -> None:
        """An alarm raised on part of the run that the whole run does not bear out (an
        accelerate-style read-ahead doubles the first step's batch): cleared, with the
        reason, in the log, on the card and in the exports; a milder alarm of the same
        key is raised anew (an update never changes what an alarm counts for)."""
        now_by_key = {a.key: a for a in found}
        for key in sorted(self.live_keys):
            was, now = self.raised.get(key), now_by_key.get(key)
            if was is None or (now is not None and ev.SEVERITY_RANK.get(now.severity, 0)
                               >= ev.SEVERITY_RANK.get(was.severity, 0)):
                continue
            alarm_id = self.refresh.alarm_id(key)
            del self.raised[key]
            if alarm_id is None:
                continue
            self.verifier.bus.publish(ev.AlarmCleared(
                session_id=self.verifier.session_id, alarm_id=alarm_id,
                reason="raised on part of the run; the final judgement over the whole run "
                       + ("does not confirm it" if now is None
                          else f"finds it {now.severity}: {now.title}")[:300]))
        self.live_keys.clear()

    def stop_if_decided(self, found: list[Alarm], step: int | None) -> None:
        """[stop]: an alarm later steps cannot undo ends the run now. Only once every
        reference is in: one raised against some of them may yet be cleared."""
        verifier = self.verifier
        if not self.all_in.done() or self.stopped_by or verifier.halted:
            return
        hit = next((a for a in sort_alarms(found) if a.key in self.raised
                    and stops(a.kind, a.severity, verifier.criteria.stop.alarms)), None)
        if hit is not None:
            self.stopped_by = (hit, step)
            verifier.runner.abort(self.spec.run_id)
