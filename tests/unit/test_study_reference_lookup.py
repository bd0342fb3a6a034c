"""Issue 40.1 in a study, without processes: a worker's reference lookup and the head's answer
(core/study/reference_lookup.py), as lines, the way they travel."""

from __future__ import annotations

import threading
from typing import Any

from portside.core.log import events as ev
from portside.core.session.reference_reuse import StoredReference
from portside.core.study.reference_lookup import LOOKUP, HeadReferences, answer


def _stored(session: str, outcome: str = "passed") -> StoredReference:
    st = ev.RunStarted(session_id=session, run_id="ref1-x", role="reference", attempt=1,
                       command="python t.py", target="cpu", reuse_key="k", seq=5)
    return StoredReference(session, st, ev.RunFinished(
        session_id=session, run_id="ref1-x", exit_code=0, outcome=outcome, steps=2, ts=50.0),
        output=[ev.RunOutput(session_id=session, run_id="ref1-x", lines=["step 1"])],
        records=[ev.RunRecord(session_id=session, run_id="ref1-x",
                              records=[{"type": "step", "step": 0}, {"type": "step", "step": 1}])])


class _Source:
    def __init__(self, found: list[StoredReference], fail: bool = False) -> None:
        self.found, self.fail = found, fail
        self.asked: list[tuple[str, str, int, str]] = []

    def find(self, key: str, *, command: str, seed_offset: int, target: str
             ) -> list[StoredReference]:
        self.asked.append((key, command, seed_offset, target))
        if self.fail:
            raise OSError("database is locked")
        return self.found


def _round_trip(source: Any, wait_s: float = 5.0) -> tuple[list[StoredReference], list[bytes]]:
    """A worker's find, its line answered by the head as the channel would carry it."""
    sent: list[bytes] = []
    worker: HeadReferences

    def send(line: bytes) -> None:
        sent.append(line)
        assert line.startswith(LOOKUP) and line.endswith(b"\n")
        reply = answer(line, source)
        threading.Timer(0.01, worker.take, (reply,)).start()  # on the stdin thread, later

    worker = HeadReferences(send, wait_s=wait_s)
    return worker.find("k", command="python t.py", seed_offset=1, target="cpu"), sent


def test_the_head_answers_the_newest_run_that_may_stand_in() -> None:
    source = _Source([_stored("failed", outcome="failed-error"), _stored("good"),
                      _stored("older")])
    got, sent = _round_trip(source)
    assert source.asked == [("k", "python t.py", 1, "cpu")] and len(sent) == 1
    assert [s.session_id for s in got] == ["good"]
    (s,) = got
    assert s.started.reuse_key == "k" and s.finished.steps == 2
    assert [o.lines for o in s.output] == [["step 1"]]
    assert [r.records for r in s.records] == [[{"type": "step", "step": 0},
                                               {"type": "step", "step": 1}]]


def test_nothing_stored_or_an_unreadable_store_is_no_reference() -> None:
    assert _round_trip(_Source([]))[0] == []
    assert _round_trip(_Source([_stored("x")], fail=True))[0] == []
    assert _round_trip(None)[0] == []  # a head without a database to look in


def test_a_head_that_never_answers_is_an_error_after_the_wait() -> None:
    worker = HeadReferences(lambda line: None, wait_s=0.05)
    try:
        worker.find("k", command="c", seed_offset=0, target="cpu")
    except OSError as exc:  # ReferenceReuse.find takes it for "run it fresh"
        assert "did not answer" in str(exc)
    else:
        raise AssertionError("no error")


def test_only_answers_are_taken_from_stdin() -> None:
    worker = HeadReferences(lambda line: None)
    assert not worker.take(b'{"review": {"action": "approve"}}\n')  # a reviewer's: the gate's
    assert worker.take(b'{"found": {"id": 99, "references": []}}\n')  # nobody waits: dropped
    assert answer(b'{"lookup": "nonsense"}\n', _Source([])) == b""
