"""`portside study run`: every task of a manifest, each phase started by a launcher, every event
coming back appended through the one writer of the submitting machine's database.

Resumable: a task whose session has ended is never run again; an open one continues from its
log. A phase whose worker died (``WorkerLost``) is run again from the session's log, up to
``max_tries`` times; after that the session ends failed, saying why. The log is the state:
nothing here keeps a fact the database does not hold (``study status`` folds the same log).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from portside.core.log import events as ev
from portside.core.log.ledger import Ledger
from portside.core.session.awaiting import awaiting
from portside.core.session.reference_reuse import ReferenceSource
from portside.core.session.resume import final_end

from .launchers import Launcher, WorkerLost
from .manifest import Manifest, Task
from .reference_lookup import LOOKUP, answer
from .review_relay import CARD_ACTIONS, RelayError, ReviewRelay, relay_file

MAX_TRIES = 3


class StudyLog(Protocol):
    """What a study needs of the database (store/study_log.py): one writer, the logs."""

    def find(self, study: str) -> dict[str, str]: ...  # task id -> session id

    def events(self, session_id: str) -> list[ev.Event]: ...  # committed, in seq order

    def append(self, event: ev.Event) -> None: ...

    def flush(self) -> None: ...


@dataclass
class TaskResult:
    task_id: str
    session_id: str
    ran: bool  # False: it had ended in an earlier `study run`
    tries: int = 0  # phases started, retries included
    lost: int = 0  # of which their worker died
    error: str = ""


class ProtocolError(WorkerLost):
    """A worker wrote something that is not its session's next event: it is stopped."""


class StudyRun:
    def __init__(self, manifest: Manifest, log: StudyLog, launcher: Launcher, work_root: Path, *,
                 max_tries: int = MAX_TRIES,
                 on_change: Callable[[str, str], None] | None = None,
                 references: ReferenceSource | None = None,
                 fresh_references: bool = False) -> None:
        self.manifest = manifest
        # Stored references, for the workers' lookups (core/study/reference_lookup.py); None:
        # every reference runs (and is not keyed). fresh_references: keyed, never reused.
        self.references = references
        self.fresh_references = fresh_references
        self.log = log
        self.launcher = launcher
        self.work_root = work_root
        self.max_tries = max_tries
        self.on_change = on_change or (lambda task_id, what: None)
        self._say = threading.Lock()
        # Per phase started: seconds from submit to its first event here (bench_study.py).
        self.first_event_s: list[float] = []
        self._live: set[Any] = set()  # the phases' streams now running
        self._by_session: dict[str, Any] = {}  # session -> its phase's stream, while it runs
        self._sending = threading.Lock()  # the relay answers in threads: one line at a time
        self._stopping = False
        asks = [t.task_id for t in manifest.tasks if t.policy == "ask"]
        if asks and not launcher.reviewable:  # both shipped launchers are; another may not be
            raise ValueError(f"tasks {', '.join(asks)} wait for a reviewer (policy = \"ask\"); "
                             f"the {launcher.name} launcher cannot carry decisions to its workers: "
                             "use --launcher local or ray")

    def run(self) -> list[TaskResult]:
        relay = None
        if any(t.policy == "ask" for t in self.manifest.tasks):
            # Where a reviewer's `study review` finds this process (core/study/review_relay.py).
            relay = ReviewRelay(relay_file(self.work_root, self.manifest.name), self.decide)
        try:
            return self._run()
        finally:
            if relay is not None:
                relay.close()

    def decide(self, request: dict[str, Any]) -> None:
        """A reviewer's decision (checked by the relay) to the worker of its session's phase,
        if what it answers waits now; the intervention comes back as the phase's events do."""
        sid = request["session"]
        with self._say:
            stream = self._by_session.get(sid)
        if stream is None:
            raise RelayError(f"session {sid} has no phase running now")
        waiting = awaiting(self.log.events(sid))
        if request["action"] == "verdict":
            if not any(a.kind == "claim" for a in waiting):
                raise RelayError("no claim is waiting for a verdict")
        elif request["action"] in CARD_ACTIONS and request.get("target") not in {
                a.item_id for a in waiting if a.kind == "edit"}:
            raise RelayError(f"{request.get('target')!r} is not waiting for a decision")
        try:
            with self._sending:
                stream.send(json.dumps({"review": request}).encode() + b"\n")
        except WorkerLost as exc:
            raise RelayError(str(exc)) from None

    def _run(self) -> list[TaskResult]:
        known = self.log.find(self.manifest.name)
        pool = ThreadPoolExecutor(max_workers=max(1, self.launcher.slots),
                                  thread_name_prefix="study-task")
        try:
            futures = [pool.submit(self._task, t, known.get(t.task_id)) for t in
                       self.manifest.tasks]
            results = [f.result() for f in futures]
        except BaseException:
            # ^C: every live phase told to stop (its runs cut off, as a signal cuts them);
            # the sessions stay open for the next `study run` to continue.
            self.stop()
            pool.shutdown(wait=True, cancel_futures=True)
            self.log.flush()
            raise
        pool.shutdown()
        self.log.flush()
        return results

    def stop(self) -> None:
        self._stopping = True
        with self._say:
            live = list(self._live)
        for stream in live:
            stream.cancel()

    def _tell(self, task: Task, what: str) -> None:
        with self._say:
            self.on_change(task.task_id, what)

    def _task(self, task: Task, session_id: str | None) -> TaskResult:
        sid = session_id or ev.new_session_id()
        result = TaskResult(task.task_id, sid, ran=True)
        if session_id is not None and final_end(self.log.events(sid)) is not None:
            result.ran = False
            self._tell(task, "done earlier: not run again")
            return result
        for phase in task.phases:
            log = self.log.events(sid)  # a new session's is empty
            if log and final_end(log) is not None:
                break  # the reference phase ended it (e.g. the launcher failed)
            if phase == "reference" and _references_done(log, task.reference_runs):
                continue
            while True:
                if self._stopping:
                    result.error = "stopped"
                    return result
                log = self.log.events(sid)
                result.tries += 1
                submitted = time.perf_counter()
                stream = self.launcher.start(self._job(task, sid, phase, log),
                                           task.resources(phase))
                with self._say:
                    self._live.add(stream)
                    self._by_session[sid] = stream
                self._tell(task, f"{phase} phase started ({stream.where})")
                try:
                    self._ingest(task, sid, stream, not log, submitted)
                    self._tell(task, f"{phase} phase done")
                    break
                except WorkerLost as exc:
                    result.lost += 1
                    stream.cancel()
                    self.log.flush()
                    started = bool(self.log.events(sid))
                    if self._stopping:
                        result.error = "stopped"
                        return result
                    if result.lost >= self.max_tries:
                        why = f"study: the {phase} phase's worker was lost {result.lost} " \
                              f"times; last: {exc}"
                        result.error = why
                        if started:
                            self._close_cut_off(sid, why)
                        self._tell(task, f"failed: {why}")
                        return result
                    if started:
                        self.log.append(ev.SessionState(
                            session_id=sid, state="study-retry",
                            detail=f"{phase} phase's worker lost ({exc}); run again from the "
                                   f"log (try {result.lost + 1} of {self.max_tries})"))
                    self._tell(task, f"{phase} phase lost, run again: {exc}")
                finally:
                    with self._say:
                        self._live.discard(stream)
                        if self._by_session.get(sid) is stream:
                            del self._by_session[sid]
        self.log.flush()
        return result

    def _job(self, task: Task, sid: str, phase: str, log: list[ev.Event]) -> dict[str, Any]:
        return {
            "task": task.to_dict(), "session_id": sid, "phase": phase,
            "work_root": str(self.work_root),
            "study": {"name": self.manifest.name, "task": task.task_id,
                      "project": task.project, "repetition": task.repetition},
            "log": [ev.encode(e).decode() for e in log],
            # Its references keyed (a later session may reuse them), and looked up here.
            "keyed": self.references is not None,
            "lookups": self._lookups(task, phase),
            "fresh_references": self.fresh_references,
        }

    def _lookups(self, task: Task, phase: str) -> bool:
        """Whether the phase's references are looked up here before they run: not in a
        candidate phase (they have run by then), and only where the launcher carries the
        answer to the worker (local: every phase's stdin; Ray: the mailbox an asking task's
        phase has. A mailbox for every Ray phase was tried: six reference phases at once on a
        loaded head lost some, and each lost mailbox ended its phase.)"""
        if self.references is None or phase == "candidate":
            return False
        return self.launcher.lines_to_every_phase or task.policy == "ask"

    def _ingest(self, task: Task, sid: str, stream: Any, first: bool,
                submitted: float) -> None:
        """Each line the worker wrote, checked, appended in order; the writer numbers it."""
        timed = False
        for line in stream.lines():
            if not timed:
                timed = True
                self.first_event_s.append(time.perf_counter() - submitted)
            if line.startswith(LOOKUP):  # a reference about to run: stored here already?
                reply = answer(line, self.references)
                try:
                    if reply:
                        with self._sending:
                            stream.send(reply)
                except WorkerLost:
                    pass  # unanswered, it runs fresh; a worker that is gone ends its lines
                continue
            try:
                event = ev.decode(line)
                ev.check_payload(event)
            except ev.EventError as exc:
                raise ProtocolError(f"worker wrote a bad event: {exc}") from None
            if event.session_id != sid:
                raise ProtocolError(f"worker wrote an event of session {event.session_id!r}, "
                                    f"not of its own ({sid})")
            if first and not isinstance(event, ev.SessionStarted):
                raise ProtocolError(f"worker's first event is {event.kind}, not session.started")  # type: ignore[attr-defined]
            first = False
            event.seq = 0
            self.log.append(event)
            if task.policy == "ask" and isinstance(event, ev.EditProposed | ev.CommandProposed
                                                   | ev.AgentClaimed):
                self._tell(task, f"waiting for a reviewer: `portside study review {sid}`")

    def _close_cut_off(self, sid: str, why: str) -> None:
        """The end a killed launcher never wrote: its live runs aborted (engine-killed, never
        attempts), then the session failed with the reason."""
        from portside.core.log.ledger import ENGINE_KILLED

        log = self.log.events(sid)
        finished = {e.run_id for e in log if isinstance(e, ev.RunFinished)}
        for e in log:
            if isinstance(e, ev.RunStarted) and e.run_id not in finished:
                self.log.append(ev.RunFinished(
                    session_id=sid, run_id=e.run_id, exit_code=None, outcome="aborted",
                    reason=ENGINE_KILLED, wall_s=max(0.0, log[-1].ts - e.ts),
                    error_message="the study's worker was lost while this run was live"))
        self.log.append(ev.SessionEnded(session_id=sid, verdict="fail", outcome="failed-error",
                                        reason=why[:400]))
        self.log.flush()


def _references_done(log: list[ev.Event], wanted: int) -> bool:
    """Whether the session's reference phase has ended already (a `study run` restarted
    between phases): as many finished references as asked, none cut off."""
    if not log:
        return False
    led = Ledger()
    for e in log:
        led.apply(e)
    done = [r for r in led.runs.values() if r.role == "reference" and r.finished is not None
            and not r.engine_killed and r.outcome != "aborted"]
    return len(done) >= wanted


def make_launcher(name: str, *, parallel: int | None = None, address: str | None = None) -> Launcher:
    if name == "local":
        from .local_launcher import LocalLauncher

        return LocalLauncher(parallel)
    if name == "ray":
        from .ray_launcher import RayLauncher

        return RayLauncher(address, parallel)
    raise ValueError(f"unknown launcher {name!r} (local, ray)")
