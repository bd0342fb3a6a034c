"""Names as the workspace shows them, and the error it refuses with.

A file name is any bytes but "/" and NUL; Python holds a non-UTF-8 byte as a lone surrogate
(os.fsdecode), which no UTF-8 text (an event, JSON, the terminal) can carry. Every path the
workspace hands out is shown with such a byte as \\xHH and a backslash as \\\\; every path it is
given is read back the same way, so a shown name round-trips to the same file.
"""

from __future__ import annotations

import re

__all__ = ["WorkspaceError", "display_path", "real_path"]

_SURROGATE = re.compile("[\udc80-\udcff]")
_ESCAPED = re.compile(r"\\(\\|x[89a-fA-F][0-9a-fA-F])?")


def _escape_byte(m: re.Match[str]) -> str:
    return f"\\x{ord(m.group()) - 0xDC00:02x}"


class WorkspaceError(Exception):
    """A refused path or edit, or a workspace that cannot be created/opened; the message is
    meant to be shown to the agent or the reviewer as is (a name's non-UTF-8 bytes escaped,
    so it can be stored)."""

    def __init__(self, message: str = "") -> None:
        super().__init__(_SURROGATE.sub(_escape_byte, message))

def display_path(name: str) -> str:
    """``name`` as UTF-8 text that says its bytes (see :func:`real_path`)."""
    if "\\" not in name and not _SURROGATE.search(name):
        return name
    return _SURROGATE.sub(_escape_byte, name.replace("\\", "\\\\"))


def real_path(shown: str) -> str:
    """The name :func:`display_path` showed as ``shown``. Any other backslash is refused: it is
    usually a Windows separator."""
    if "\\" not in shown:
        return shown

    def back(m: re.Match[str]) -> str:
        code = m.group(1)
        if code is None:
            head = shown if len(shown) <= 80 else shown[:77] + "..."
            raise WorkspaceError(f"refused path {head!r}: backslashes are not allowed; use '/'"
                                 " (a name's own backslash is \\\\, a byte that is not UTF-8 "
                                 "\\xHH)")
        return "\\" if code == "\\" else chr(0xDC00 + int(code[1:], 16))

    return _ESCAPED.sub(back, shown)
