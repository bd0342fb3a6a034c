"""The Ray task's batching of a worker's event lines (core/study/ray_launcher.py): a line the
worker follows with silence — a card waiting for a reviewer — reaches the head at once, not
with the next line (which, for a card, comes only after the reviewer decided: a deadlock)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from portside.core.study.launchers import WorkerLost
from portside.core.study.ray_launcher import BATCH_S, _batches


def test_a_line_followed_by_silence_is_sent_within_the_batch_time() -> None:
    decided = threading.Event()

    def worker() -> Iterator[bytes]:
        yield b"edit.proposed\n"
        decided.wait(10)  # the worker waits for the reviewer's decision
        yield b"intervention\n"

    batches = _batches(worker())
    t0 = time.monotonic()
    first = next(batches)
    waited = time.monotonic() - t0
    decided.set()
    assert first == [b"edit.proposed\n"]
    assert waited < BATCH_S + 2.0, waited  # not the 10 s of the reviewer's wait
    assert list(batches) == [[b"intervention\n"]]


def test_a_steady_flow_is_batched_in_order_and_a_lost_worker_is_raised() -> None:
    def worker() -> Iterator[bytes]:
        for i in range(200):
            yield f"{i}\n".encode()
            if i % 50 == 0:
                time.sleep(BATCH_S / 5)
        raise WorkerLost("worker ended with status -9")

    got: list[list[bytes]] = []
    with pytest.raises(WorkerLost, match="status -9"):
        for batch in _batches(worker()):
            got.append(batch)
    assert [line for b in got for line in b] == [f"{i}\n".encode() for i in range(200)]
    assert len(got) < 200  # gathered, not one batch per line
