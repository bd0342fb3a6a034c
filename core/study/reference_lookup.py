"""Reference reuse in a study (core/session/reference_reuse.py): the worker keys its references,
the head finds them.

A worker has no database, and only it can make a reference's key (the project as checked out
there, the interpreter and accelerators of its node). So before a reference runs, its worker
asks the head: a ``{"lookup": …}`` line on its events channel, between events, with the key,
command, seed offset and target. The head (core/study/driver.py) looks the key up in the study's
database (store/reference_runs.py, through the ReferenceSource it was given), and answers on the
worker's stdin, the way a reviewer's decision goes: ``{"found": {"id": …, "references": […]}}``,
the newest stored run that may stand in (its session and its events), or none. The worker copies
it into its session's log as any session does; those events come back to the head as the
worker's own. No answer within LOOKUP_WAIT_S (a head that cannot carry lines to the worker, a
database that cannot be read) means a fresh run, never a guess.

A reused reference costs nothing in the session that copied it (the ledger counts a run's
compute where it ran), so a study's tables count each reference's compute once: in the task
that ran it, or not at all when it ran outside the study.
"""

from __future__ import annotations

import itertools
import json
import queue
import threading
from collections.abc import Callable
from typing import Any

from portside.core.log import events as ev
from portside.core.session.reference_reuse import ReferenceSource, StoredReference, unusable

__all__ = ["FOUND", "LOOKUP", "HeadReferences", "answer"]

LOOKUP = b'{"lookup":'
FOUND = b'{"found":'
LOOKUP_WAIT_S = 60.0  # for the head's answer; past it the reference runs


def _encode(stored: StoredReference) -> dict[str, Any]:
    events: list[ev.Event] = [stored.started, *stored.output, *stored.records, stored.finished]
    return {"session": stored.session_id, "events": [ev.encode(e).decode() for e in events]}


def _decode(body: Any) -> StoredReference:
    """A stored reference as the head sent it; ValueError where it is not one."""
    if not isinstance(body, dict) or not isinstance(body.get("session"), str):
        raise ValueError("a stored reference without its session")
    events = [ev.decode(str(line).encode()) for line in body.get("events") or []]
    if len(events) < 2 or not isinstance(events[0], ev.RunStarted) \
            or not isinstance(events[-1], ev.RunFinished):
        raise ValueError("a stored reference is its run's start, output, records and end")
    out = StoredReference(body["session"], events[0], events[-1])
    for e in events[1:-1]:
        if isinstance(e, ev.RunOutput):
            out.output.append(e)
        elif isinstance(e, ev.RunRecord):
            out.records.append(e)
        else:
            raise ValueError(f"a stored reference holds a {e.kind} event")  # type: ignore[attr-defined]
    return out


def answer(line: bytes, source: ReferenceSource | None) -> bytes:
    """The head's answer to a worker's lookup line: the newest stored run of that key that may
    stand in, or none (no source, a request that is not one, a store that cannot be read)."""
    try:
        req = json.loads(line)["lookup"]
        n = int(req["id"])
    except (ValueError, KeyError, TypeError):
        return b""  # not a lookup at all: nothing to answer (the worker runs it fresh)
    found: list[dict[str, Any]] = []
    if source is not None:
        try:
            key, command, target = str(req["key"]), str(req["command"]), str(req["target"])
            stored = source.find(key, command=command, seed_offset=int(req["seed_offset"]),
                                 target=target)
            found = [_encode(s) for s in stored if not unusable(s)][:1]
        except Exception:  # noqa: BLE001 -- an unreadable store, a bad request: run it fresh
            found = []
    return json.dumps({"found": {"id": n, "references": found}}).encode() + b"\n"


class HeadReferences:
    """The worker's ReferenceSource: each find a lookup line to the head (``send``, written
    between the events), its answer routed back by ``take`` from the worker's stdin."""

    def __init__(self, send: Callable[[bytes], None], wait_s: float = LOOKUP_WAIT_S) -> None:
        self._send = send
        self.wait_s = wait_s
        self._ids = itertools.count(1)
        self._waiting: dict[int, queue.Queue[Any]] = {}
        self._lock = threading.Lock()

    def find(self, key: str, *, command: str, seed_offset: int, target: str
             ) -> list[StoredReference]:
        n = next(self._ids)
        box: queue.Queue[Any] = queue.Queue(maxsize=1)
        with self._lock:
            self._waiting[n] = box
        try:
            self._send(json.dumps({"lookup": {
                "id": n, "key": key, "command": command, "seed_offset": seed_offset,
                "target": target}}).encode() + b"\n")
            try:
                refs = box.get(timeout=self.wait_s)
            except queue.Empty:
                raise OSError(f"the study's head did not answer within {self.wait_s:g} s"
                              ) from None
        finally:
            with self._lock:
                self._waiting.pop(n, None)
        return [_decode(r) for r in refs]

    def take(self, line: bytes) -> bool:
        """Whether ``line`` (from the worker's stdin) was an answer; handed to its find."""
        if not line.startswith(FOUND):
            return False
        try:
            body = json.loads(line)["found"]
            n, refs = int(body["id"]), list(body["references"])
        except (ValueError, KeyError, TypeError):
            return True  # an answer, unreadable: its find runs the reference fresh in time
        with self._lock:
            box = self._waiting.get(n)
        if box is not None:
            box.put_nowait(refs)
        return True
