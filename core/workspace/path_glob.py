"""Globs over a workspace's relative paths, where ``**`` crosses directories (fnmatch's ``*``
would too, so it cannot tell ``*.py`` at the top from ``**/*.py``)."""

from __future__ import annotations

import re

from .names import WorkspaceError

__all__ = ["glob_regex"]


def glob_regex(pattern: str) -> re.Pattern[str]:
    """Translate a glob to a regex over relative POSIX paths: ``*`` and ``?`` stay within a
    component, ``**`` crosses directories, ``[...]`` is a character class."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        if pattern.startswith("**/", i):
            out.append("(?:[^/]*/)*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and (end := pattern.find("]", i + 2)) != -1:
            body = pattern[i + 1 : end]
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    try:
        return re.compile("".join(out) + r"\Z")
    except re.error as exc:
        raise WorkspaceError(f"bad glob {pattern!r}: {exc}") from None
