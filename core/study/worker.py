"""One phase of one study task, in a process of its own, on whichever machine the launcher chose.

``python -m portside.core.study.worker --events-fd N``: the job (one JSON line) comes on stdin;
the session's events go out on descriptor N, one encoded event per line, and a last line
``{"phase": "done"}`` once the phase ended in good order. Nothing is written to any database
here: the submitting machine's one writer appends what arrives (core/study/driver.py).

A job names its session and carries the session's log so far: a phase after the first, or one
whose worker died, continues the session from that log exactly as ``run --resume`` does
(core/session/resume.py): finished references are not run again, a run the dead worker left live is
finished ``aborted`` / ``engine-killed`` (never an attempt). stdin stays open for the worker's
life: when it closes, whoever started the worker is gone, and the live runs are stopped.

With ``keyed`` in the job, each reference is keyed here (a later session may reuse it); with
``lookups`` too, looked up in the head's database before it runs
(core/study/reference_lookup.py): a lookup line on the events channel, the answer on stdin.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from portside.core.log import events as ev

DONE = b'{"phase": "done"}\n'
PARENT_GONE_GRACE_S = 5.0  # for the runs to be stopped before the worker exits anyway


class ChannelSink:
    """The engine's sink: each event, encoded, on the channel, in order. ``seq`` continues the
    log the job carried, so the worker's own view (ledger, resume rules) matches the head's."""

    def __init__(self, out: BinaryIO, next_seq: int) -> None:
        self._out = out
        self._seq = next_seq
        self._lock = threading.Lock()
        self.gone = False  # the reader is gone: nothing more can reach the log

    def append(self, event: ev.Event) -> ev.Event:
        with self._lock:
            event.seq = self._seq
            self._seq += 1
            if not event.ts:
                event.ts = time.time()
            if not self.gone:
                try:
                    self._out.write(ev.encode(event) + b"\n")
                    self._out.flush()
                except (BrokenPipeError, ValueError):
                    # The head died: the engine winds down (its parent-watch stops it)
                    # instead of failing on every publish; the log resumes from what arrived.
                    self.gone = True
        return event

    def append_durable(self, event: ev.Event, timeout: float = 30.0) -> ev.Event:
        # Durable where the head commits it; the channel is in order, so this is an append.
        return self.append(event)

    def request(self, line: bytes) -> None:
        """A line for the head that is not an event (a reference lookup:
        core/study/reference_lookup.py), between two events, never inside one."""
        with self._lock:
            if self.gone:
                raise OSError("the study's head is gone")
            try:
                self._out.write(line)
                self._out.flush()
            except (BrokenPipeError, ValueError) as exc:
                self.gone = True
                raise OSError("the study's head is gone") from exc


def where_label() -> str:
    """Where this worker runs, for the log: the launcher's node id when it gave one."""
    node = os.environ.get("PORTSIDE_STUDY_NODE", "")
    return f"{socket.gethostname()}" + (f" (node {node[:12]})" if node else "")


def _agent(spec: str, task_text: str) -> Any:
    """The manifest's agent (checked there: claude[:MODEL], claude-code[:MODEL], scripted:FILE)."""
    if spec.startswith("scripted:"):
        from portside.core.agent.scripted import ScriptedAgent

        return ScriptedAgent(Path(spec.removeprefix("scripted:")))
    kind, _, model = spec.partition(":")
    if kind == "claude-code":
        from portside.core.agent.task import default_task
        from portside.core.claude_code.live import ClaudeCodeAgent

        agent = ClaudeCodeAgent(model or None)
        agent.task = task_text or default_task("tpu")
        return agent
    from portside.core.agent.claude import ClaudeAgent

    return ClaudeAgent(model=model or "claude-sonnet-4-5")


def _config(task: Any, work_root: Path, project: Path, study: dict[str, Any]) -> Any:
    from portside.core.log.criteria import load_criteria
    from portside.core.session.engine import SessionConfig

    agent = _agent(task.agent, task.agent_task) if task.agent else None
    return SessionConfig(
        project=project, target=task.target, reference_command=task.reference,
        candidate_command=task.candidate, criteria=load_criteria(task.criteria or None),
        criteria_path=task.criteria, reference_runs=task.reference_runs,
        reference_target=task.reference_target, timeout_s=task.timeout_s, stall_s=task.stall_s,
        # "ask": the edits wait for a reviewer who opens the session from elsewhere; their
        # decisions come on this worker's stdin (_watch_parent).
        agent=agent, policy=task.policy, mode="verify" if agent is None else "headless",
        work_root=work_root, isolate=agent is not None, meta={"study": study},
    )


def _placed(engine: Any, phase: str) -> None:
    engine.bus.publish(ev.SessionState(session_id=engine.session_id, state="study-placed",
                                       detail=f"{phase} phase on {where_label()}"))


def run_job(job: dict[str, Any], out: BinaryIO) -> None:
    from portside.core.session.resume import engine_from_log

    from .checkout import project_folder
    from .manifest import Task

    task = Task.from_dict(job["task"])
    log = [ev.decode(line) for line in job.get("log", [])]
    sink = ChannelSink(out, (log[-1].seq + 1) if log else 1)
    if log:
        engine = engine_from_log(log, sink, policy=task.policy)
    else:
        project = project_folder(task, Path(job["work_root"]) / "checkouts")
        config = _config(task, Path(job["work_root"]), project, job["study"])
        from portside.core.session.engine import SessionEngine

        engine = SessionEngine(config, sink, session_id=job["session_id"])
    phase = job["phase"]
    lookups = None
    if job.get("keyed"):
        from portside.core.session.reference_reuse import ReferenceReuse

        from .reference_lookup import HeadReferences

        if job.get("lookups"):  # the head answers (core/study/reference_lookup.py)
            lookups = HeadReferences(sink.request)
        engine.verifier.reuse = ReferenceReuse(
            Path(engine.config.project), lookups,
            cache_file=Path(job["work_root"]) / "interpreters.json",
            fresh=bool(job.get("fresh_references")))

    async def watched(coro: Any) -> None:
        _watch_parent(engine, asyncio.get_running_loop(), lookups.take if lookups else None)
        await coro

    # Where the phase runs, in the log once the session has started (or resumed) here.
    first = True

    def on_event(e: ev.Event) -> None:
        nonlocal first
        if first and (isinstance(e, ev.SessionStarted) if not log else
                      isinstance(e, ev.SessionState) and e.state == "resumed"):
            first = False
            _placed(engine, phase)
    engine.bus.subscribe(on_event)
    # The reference phase has no end: the candidate phase continues the session.
    try:
        asyncio.run(watched(engine.run_references() if phase == "reference" else engine.run()))
    except asyncio.CancelledError:  # _interrupt ended a reviewer's wait: said, no traceback
        raise SystemExit("portside study worker: stopped while a card waited for a reviewer; "
                         "the session ended interrupted, and the next `study run` resumes it"
                         ) from None


def _watch_parent(engine: Any, loop: asyncio.AbstractEventLoop,
                  answered: Callable[[bytes], bool] | None = None) -> None:
    """stdin closes when the process that started this worker is gone (a dead Ray worker, a
    killed `study run`) or stops it (^C there): the session is interrupted as a signal
    interrupts it (live runs cut off, never attempts; resumable), then the worker exits.
    Until then each line on it is the head's answer to a reference lookup (``answered``
    takes it) or a reviewer's decision, for the engine's gate."""

    def watch() -> None:
        # The raw descriptor, not sys.stdin: a daemon thread inside a buffered read holds its
        # lock, and the interpreter aborts at exit waiting for it.
        pending = b""
        try:
            while chunk := os.read(0, 65536):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if answered is not None and answered(line):
                        continue
                    with contextlib.suppress(RuntimeError):  # the loop has ended
                        loop.call_soon_threadsafe(_review, engine, line)
        except OSError:
            pass
        with contextlib.suppress(RuntimeError):  # the loop has ended: nothing left to stop
            loop.call_soon_threadsafe(_interrupt, engine,
                                      "the end of its stdin (the study stopped or died)")
        time.sleep(PARENT_GONE_GRACE_S)
        os._exit(70)

    threading.Thread(target=watch, name="study-parent-watch", daemon=True).start()


def _interrupt(engine: Any, why: str) -> None:
    engine.interrupt(why)
    # A card waiting for a reviewer (policy = "ask") waits no more: the agent's wait is
    # cancelled, and the session ends interrupted, as a signal ends it (resumed next run).
    for item in list(engine.gate.pending.values()):
        if item.future is not None and not item.future.done():
            item.future.cancel()


def _review(engine: Any, line: bytes) -> None:
    """A decision the head passed on (core/study/review_relay.py), on the engine's loop: the
    gate records the intervention (under the reviewer's name, their attention from when the
    card was on their screen), which reaches the log like every event. One that does not
    apply any more (decided meanwhile) is said on this worker's log, nothing else."""
    from portside.core.session.review import GateError

    from .review_relay import RelayError, check_request

    try:
        req = check_request(json.loads(line).get("review"))
        gate = engine.gate
        if req.get("reviewer"):
            gate.reviewer = req["reviewer"]
        target, note = req.get("target", ""), req.get("note", "")
        if req.get("shown_at") and target:
            gate.shown(target, at=float(req["shown_at"]))
        started = float(req.get("shown_at") or 0.0) or None
        if req["action"] == "approve":
            gate.approve(target, note)
        elif req["action"] == "reject":
            gate.reject(target, note)
        elif req["action"] == "edit":
            gate.edit(target, req["after"], note)
        elif req["action"] == "message":
            gate.message(note, started=started)
        elif req["action"] == "pause":
            gate.pause(started)
        elif req["action"] == "resume":
            gate.resume(started)
        else:
            claim = gate.pending_claim()
            if claim is not None and req.get("shown_at"):
                gate.shown(claim.item_id, at=float(req["shown_at"]))
            gate.verdict(req["verdict"], note)
    except (ValueError, AttributeError, RelayError, GateError) as exc:
        print(f"portside study worker: a reviewer's decision not taken: {exc}", file=sys.stderr,
              flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="portside.core.study.worker")
    parser.add_argument("--events-fd", type=int, required=True)
    args = parser.parse_args(argv)
    out = os.fdopen(args.events_fd, "wb")
    job = json.loads(sys.stdin.buffer.readline())  # nothing follows it: the rest is EOF
    run_job(job, out)
    out.write(DONE)
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
