"""What the workspace hands out about files: an edit, a change against the baseline, a grep hit,
a listing; and the text helpers that draw them as git does (lines, unified diffs, quoted names)."""

from __future__ import annotations

import difflib
from dataclasses import asdict, dataclass
from typing import Any

from .names import real_path

__all__ = ["Change", "Edit", "GrepHit", "GrepHits", "Listing", "decode_text", "diff_lines",
           "quote_path", "split_lines"]


@dataclass(frozen=True)
class Edit:
    """A proposed change to one file. ``before`` is the file's text when the edit was proposed
    ("" for a new file, with ``new_file`` set); ``after`` is its text once applied."""

    edit_id: str
    path: str
    before: str
    after: str
    new_file: bool = False

    def unified_diff(self, context: int = 3) -> str:
        real = real_path(self.path)
        old = "/dev/null" if self.new_file else quote_path("a/" + real)
        return "".join(
            diff_lines(self.before, self.after, old, quote_path("b/" + real), context)
        )

    def stats(self) -> tuple[int, int]:
        """(lines added, lines removed), counted from the same diff the reviewer sees."""
        body = diff_lines(self.before, self.after, "a", "b", 0)[2:]
        return (
            sum(1 for ln in body if ln.startswith("+")),
            sum(1 for ln in body if ln.startswith("-")),
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Edit:
        return cls(
            edit_id=str(data["edit_id"]),
            path=str(data["path"]),
            before=str(data["before"]),
            after=str(data["after"]),
            new_file=bool(data.get("new_file", False)),
        )


@dataclass(frozen=True)
class GrepHit:
    path: str
    line: int  # 1-based
    text: str


@dataclass(frozen=True)
class Change:
    """One path that differs between the workspace and its baseline."""

    path: str
    status: str  # "added" | "modified" | "deleted"
    patchable: bool  # False: binary, too large, or a symlink; left out of the patch
    reason: str = ""


class Listing(list[str]):
    """A list of workspace paths; ``truncated`` says the limit cut it short."""

    truncated: bool = False


class GrepHits(list[GrepHit]):
    truncated: bool = False


def split_lines(text: str) -> list[str]:
    # Only "\n" ends a line (as in git); str.splitlines would also split on \f, \u2028, ...
    if not text:
        return []
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def diff_lines(before: str, after: str, fromfile: str, tofile: str, context: int) -> list[str]:
    out: list[str] = []
    for line in difflib.unified_diff(
        split_lines(before), split_lines(after), fromfile, tofile, n=context
    ):
        if line.endswith("\n"):
            out.append(line)
        else:
            out.append(line + "\n")
            out.append("\\ No newline at end of file\n")
    return out


_QUOTE_ESCAPES = {
    7: "\\a",
    8: "\\b",
    9: "\\t",
    10: "\\n",
    11: "\\v",
    12: "\\f",
    13: "\\r",
    34: '\\"',
    92: "\\\\",
}


def quote_path(name: str) -> str:
    """Quote a path the way git does in patch headers (C-style, octal for non-ASCII)."""
    raw = name.encode("utf-8", "surrogateescape")
    if all(32 <= c < 127 and c not in (34, 92) for c in raw):
        return name
    body = "".join(
        _QUOTE_ESCAPES.get(c) or (chr(c) if 32 <= c < 127 else f"\\{c:03o}") for c in raw
    )
    return f'"{body}"'


def decode_text(data: bytes) -> str | None:
    """Text, or None when the bytes look binary (NUL byte, or not UTF-8)."""
    if b"\x00" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None
