"""``ast.parse`` for every thread of one process, one parse at a time.

CPython 3.11 keeps the AST constructor's recursion depth in state shared by the interpreter's
threads. When the project scan parses on a worker thread while an edit's risk marks parse on
the event loop, a garbage collection inside one constructor can hand the GIL to the other, and
one of them ends with ``SystemError: AST constructor recursion depth mismatch`` (gh-106905; CI
met it). Parses are short, so one lock costs little. It is reentrant because a finalizer run by
that collection may itself parse on the same thread, which nests cleanly. A parse this module
does not own (Textual reads an action's arguments with ``literal_eval``, cached and tiny) can
still overlap one of ours; each parse starts its count afresh, so the loser simply parses again.
"""

from __future__ import annotations

import ast
import threading

_ONE_AT_A_TIME = threading.RLock()
_TRIES = 3


def parse(source: str | bytes, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse(source, filename)``, never beside another parse of this module's."""
    with _ONE_AT_A_TIME:
        for _ in range(_TRIES - 1):
            try:
                return ast.parse(source, filename=filename)
            except SystemError as e:
                if "recursion depth mismatch" not in str(e):
                    raise
        return ast.parse(source, filename=filename)
