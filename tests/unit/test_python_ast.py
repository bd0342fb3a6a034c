"""Two threads parsing Python at once, as the engine does (the project scan on a worker thread,
an edit's risk marks on the event loop). CPython 3.11 shares the AST constructor's recursion
depth between threads; a collection inside one constructor that hands the GIL to the other
ends one parse with SystemError (CI hit it in a replay test's recorded session). The harness
makes every collection yield the GIL, so the race shows within a few parses."""

from __future__ import annotations

import ast
import gc
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from portside.core.scan.scan import scan_python
from portside.core.workspace.risk import arguments

SOURCE = "x = [" + ",".join(f"f(a{i}, b=[{i}, (c, d)])" for i in range(300)) + "]\n"
LINE = "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.05, norm_type=2.0)"


@pytest.fixture
def yielding_collections() -> Iterator[None]:
    """Every garbage collection sleeps briefly, so the other thread runs mid-constructor."""
    def handoff(phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            time.sleep(0.00005)

    gc.callbacks.append(handoff)
    threshold = gc.get_threshold()
    gc.set_threshold(20)
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks.remove(handoff)


def side_by_side(a: Callable[[], object], b: Callable[[], object], times: int) -> list[str]:
    errors: list[str] = []

    def loop(fn: Callable[[], object]) -> None:
        for _ in range(times):
            try:
                fn()
            except SystemError as e:
                errors.append(str(e))
                return

    threads = [threading.Thread(target=loop, args=(fn,)) for fn in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a parse never finished"
    return errors


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the race is CPython 3.11's")
def test_the_harness_shows_the_race_with_bare_ast_parse(yielding_collections: None) -> None:
    # Without this, the test below could pass on a harness that never races.
    errors = side_by_side(lambda: ast.parse(SOURCE), lambda: ast.parse(SOURCE), times=60)
    assert errors and "recursion depth mismatch" in errors[0]


def test_the_scan_and_risk_marks_parse_side_by_side(yielding_collections: None) -> None:
    want_args = arguments(LINE)
    want_found = scan_python("big.py", SOURCE.encode())
    errors = side_by_side(lambda: scan_python("big.py", SOURCE.encode()),
                          lambda: [arguments(LINE) for _ in range(20)], times=30)
    assert errors == []
    assert arguments(LINE) == want_args and want_args["max_norm"] == "0.05"
    assert scan_python("big.py", SOURCE.encode()) == want_found
