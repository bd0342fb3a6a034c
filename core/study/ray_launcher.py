"""The Ray launcher: each phase of a task is a Ray task asking for the phase's resources
(references a ``CPU`` or ``GPU``, candidates the target's, e.g. ``TPU: 4``), so Ray places it.

The Ray task starts the same worker process as the local launcher on its node and streams the
worker's event lines back in batches (a streaming generator): the submitting process appends
them through its one writer. Ray does not retry a phase itself (``max_retries=0``): a phase
whose node or worker died is run again by the study, from the session's log, so the cut-off
run is finished ``engine-killed`` and never counted as an attempt.

A phase of a task that waits for a reviewer (``policy = "ask"``) gets a mailbox: a small Ray
actor (no CPU) the head creates on its own node, so losing the worker's node loses no decision.
The head puts each decision in it (``send``); a thread of the phase's Ray task takes them, with
a short wait each, and writes them on the worker's stdin, as the local launcher does. Every call
between them has a timeout: a mailbox that is lost or stops answering ends the phase as
``WorkerLost`` (run again from the log, with a new mailbox), never a hang.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .launchers import WorkerLost

BATCH_S = 0.05  # how long lines gather before a batch goes back to the head
TAKE_WAIT_S = 0.5  # how long one take() waits in the mailbox (a line put meanwhile: at once)
CALL_TIMEOUT_S = 10.0  # for one call to the mailbox to come back (a loaded node is slow)
MAILBOX_LOST_S = 60.0  # no answer from the mailbox for this long: it, or its node, is lost
PUT_TIMEOUT_S = 8.0  # under the reviewer's 10 s wait for the relay (review_relay.py): they read why


class Mailbox:
    """A phase's lines from the head to its worker (a Ray actor; async, so a take waiting for
    a line does not hold a put up)."""

    def __init__(self) -> None:
        self._lines: asyncio.Queue[bytes] | None = None

    def _queue(self) -> asyncio.Queue[bytes]:
        if self._lines is None:  # made on the actor's loop, where it is used
            self._lines = asyncio.Queue()
        return self._lines

    async def put(self, line: bytes) -> None:
        self._queue().put_nowait(line)

    async def take(self, wait_s: float) -> list[bytes]:
        """The lines waiting, in order; none once ``wait_s`` passed without one."""
        q = self._queue()
        try:
            lines = [await asyncio.wait_for(q.get(), wait_s)]
        except TimeoutError:
            return []
        while not q.empty():
            lines.append(q.get_nowait())
        return lines


def _carry(mailbox: Any, worker: Any, stop: threading.Event, lost: list[str]) -> None:
    """In the phase's Ray task: the mailbox's lines to the worker's stdin until the phase ends.
    A lost mailbox stops the worker (its session interrupted, resumable) and says why."""
    import ray

    answered = time.monotonic()
    while not stop.is_set():
        try:
            lines = ray.get(mailbox.take.remote(TAKE_WAIT_S), timeout=CALL_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            if time.monotonic() - answered < MAILBOX_LOST_S:
                continue
            why = f"did not answer for {MAILBOX_LOST_S:.0f} s"
        except ray.exceptions.RayError as exc:  # the actor or its node died
            why = f"{type(exc).__name__}: {str(exc).strip()[-200:]}"
        else:
            answered = time.monotonic()
            for line in lines:
                try:
                    worker.send(line)
                except WorkerLost:
                    return  # the worker has ended: its lines say how
            continue
        if not stop.is_set():
            lost.append(f"the phase's reviewer mailbox was lost ({why})")
            worker.cancel()
        return


def _phase_task(job: dict[str, Any], mailbox: Any = None) -> Iterator[list[bytes]]:
    """Runs on the node Ray chose: the worker, its lines back in batches; with a mailbox, the
    reviewer's decisions in it carried to the worker."""
    import ray

    from .local_launcher import WorkerProcess

    node = ray.get_runtime_context().get_node_id()
    log = Path(tempfile.gettempdir()) / "portside-study" / f"{job['session_id']}-{job['phase']}.log"
    worker = WorkerProcess(job, log, env={"PORTSIDE_STUDY_NODE": node})
    # Ray reuses its worker processes: the thread must end with the phase, not with them.
    stop = threading.Event()
    lost: list[str] = []  # why the mailbox was lost: the phase's WorkerLost says it
    if mailbox is not None:
        threading.Thread(target=_carry, args=(mailbox, worker, stop, lost), daemon=True,
                         name="study-mailbox").start()
    try:
        yield from _batches(worker.lines())  # WorkerLost propagates: the head sees it fail
    except WorkerLost:
        if lost:
            raise WorkerLost(lost[0]) from None
        raise
    finally:
        stop.set()


def _batches(lines: Iterator[bytes]) -> Iterator[list[bytes]]:
    """The lines in batches, each sent ``BATCH_S`` after its first line came: a line the worker
    follows with silence (a card waiting for a reviewer) is not held back for the next."""
    got: queue.Queue[bytes | BaseException | None] = queue.Queue()

    def read() -> None:
        try:
            for line in lines:
                got.put(line)
            got.put(None)
        except BaseException as exc:  # noqa: BLE001 (raised again in the task, below)
            got.put(exc)

    threading.Thread(target=read, daemon=True, name="study-events").start()
    batch: list[bytes] = []
    due = 0.0
    while True:
        try:
            # Waits with nothing to send are only bounded to stay interruptible.
            item = got.get(timeout=max(0.0, due - time.monotonic()) if batch else 1.0)
        except queue.Empty:
            if batch:
                yield batch
                batch = []
            continue
        if item is None or isinstance(item, BaseException):
            if batch:
                yield batch
            if item is None:
                return
            raise item
        if not batch:
            due = time.monotonic() + BATCH_S
        batch.append(item)
        if time.monotonic() >= due:  # a steady flow: sent on time all the same
            yield batch
            batch = []


class RayStream:
    def __init__(self, ref_gen: Any, where: str, mailbox: Any = None) -> None:
        self._gen = ref_gen
        self._mailbox = mailbox
        self.where = where

    def lines(self) -> Iterator[bytes]:
        import ray

        try:
            for ref in self._gen:
                yield from ray.get(ref)
        except ray.exceptions.RayError as exc:  # a dead node, worker or the task's own error
            raise WorkerLost(f"ray: {type(exc).__name__}: {str(exc).strip()[-300:]}") from None
        finally:
            self._close_mailbox()

    def send(self, line: bytes) -> None:
        """The line in the phase's mailbox (the phase's task carries it to the worker)."""
        import ray

        if self._mailbox is None:
            raise WorkerLost(f"{self.where}: this phase takes no reviewer's decisions (its "
                             "task's policy is not \"ask\")")
        try:
            ray.get(self._mailbox.put.remote(line), timeout=PUT_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            # The put may still land (a mailbox still starting): deciding again is safe, as
            # a card that no longer waits refuses a second decision.
            raise WorkerLost(f"{self.where}: its mailbox did not take the decision within "
                             f"{PUT_TIMEOUT_S:.0f} s (it may yet); try again") from None
        except ray.exceptions.RayError as exc:
            raise WorkerLost(f"{self.where}: its mailbox is lost ({type(exc).__name__})"
                             ) from None

    def cancel(self) -> None:
        import ray

        with contextlib.suppress(Exception):  # already finished or gone: nothing to cancel
            ray.cancel(self._gen, force=True)
        self._close_mailbox()

    def _close_mailbox(self) -> None:
        import ray

        mailbox, self._mailbox = self._mailbox, None
        if mailbox is not None:
            with contextlib.suppress(Exception):  # gone with its node: nothing to end
                ray.kill(mailbox)


def _loopback(address: str) -> bool:
    """Whether ``address`` (HOST:PORT) names this machine's loopback."""
    host = address.rpartition(":")[0].strip("[]") if ":" in address else address
    return host in ("127.0.0.1", "localhost", "::1")


class RayLauncher:
    name = "ray"
    reviewable = True  # through each asking phase's mailbox
    lines_to_every_phase = False  # only an asking task's phase has a mailbox

    def __init__(self, address: str | None, parallel: int | None = None) -> None:
        if _loopback(address or os.environ.get("RAY_ADDRESS") or ""):
            # Ray turns 127.0.0.1 into the host's outward IP (to be reachable from other
            # machines), which a cluster bound to loopback does not listen on; its one-machine
            # switch keeps 127.0.0.1 as given. Read when ray is first imported.
            os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        try:
            import ray
        except ImportError:
            raise ValueError("the ray launcher needs Ray: pip install 'portside[ray]'") from None
        if not ray.is_initialized():
            # The workers import portside as this process does (PYTHONPATH travels along).
            env = {k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ}
            ray.init(address=address or os.environ.get("RAY_ADDRESS") or "auto",
                     runtime_env={"env_vars": env} if env else None,
                     log_to_driver=False)
        self._task = ray.remote(_phase_task)
        # No CPU (a node with none free still takes it), on this process's node, kept there.
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self._mailbox = ray.remote(Mailbox).options(
            num_cpus=0, max_restarts=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
                ray.get_runtime_context().get_node_id(), soft=True))
        # Ray queues what the cluster cannot place yet; the bound only caps head-side threads.
        self.slots = parallel or 64

    def start(self, job: dict[str, Any], resources: dict[str, float]) -> RayStream:
        res = dict(resources)
        options: dict[str, Any] = {"max_retries": 0, "num_cpus": res.pop("CPU", 0.0),
                                   "num_gpus": res.pop("GPU", 0.0)}
        if res:
            options["resources"] = res
        # Only a task that waits for a reviewer takes decisions: the others poll nothing.
        mailbox = self._mailbox.remote() if job["task"].get("policy") == "ask" else None
        gen = self._task.options(**options).remote(job, mailbox)
        return RayStream(gen, f"ray {', '.join(f'{k}={v:g}' for k, v in resources.items())}",
                         mailbox)

    def close(self) -> None:
        pass
