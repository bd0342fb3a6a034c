"""Compact storage for a run's output: one bytearray and an offsets array, not a list of str.

A million 60-character lines cost about 68 MB here instead of ~110 MB of str objects, and
nothing is rendered until a line scrolls into view. Lines are stored raw (already str from the
event, invalid UTF-8 already U+FFFD) and cleaned for display on demand, so a flood costs only an
encode and an append per line.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right

# A line longer than this is cut at ingest; clean_line cuts again (with a note) at display.
MAX_STORED = 16_384


class LineStore:
    def __init__(self) -> None:
        self._data = bytearray()
        self._starts = array("Q")
        self.max_len = 0  # longest stored line, in characters (for the virtual width)

    def __len__(self) -> int:
        return len(self._starts)

    def extend(self, lines: list[str]) -> None:
        data, starts = self._data, self._starts
        longest = self.max_len
        for line in lines:
            if len(line) > MAX_STORED:
                line = line[:MAX_STORED]
            starts.append(len(data))
            data += line.encode("utf-8", "replace")
            data += b"\n"  # a separator, so a search never matches across two lines
            if len(line) > longest:
                longest = len(line)
        self.max_len = longest

    def __getitem__(self, index: int) -> str:
        starts = self._starts
        start = starts[index]
        end = (starts[index + 1] if index + 1 < len(starts) else len(self._data)) - 1
        return self._data[start:end].decode("utf-8", "replace")

    def find(self, needle: str, start_line: int = 0, backwards: bool = False) -> int | None:
        """Index of the next line containing ``needle`` (case-insensitive when it is lower
        case), searching from ``start_line`` and wrapping; None when absent."""
        if not needle or not self._starts:
            return None
        hay = self._data if needle != needle.lower() else self._data.lower()
        pat = needle.encode("utf-8")
        n = len(self._starts)
        start_line = max(0, min(start_line, n - 1))
        offset = self._starts[start_line]
        if backwards:
            pos = hay.rfind(pat, 0, offset)
            if pos < 0:
                pos = hay.rfind(pat, offset)
        else:
            pos = hay.find(pat, offset)
            if pos < 0:
                pos = hay.find(pat, 0, offset)
        if pos < 0:
            return None
        return bisect_right(self._starts, pos) - 1
