"""Compact storage for a run's output: an index of line offsets in memory, the bytes spilled.

Only the index lives in memory (4 bytes a line, plus a few bytes per 4 GiB), with the newest
bytes in a bounded buffer; older bytes go to an unlinked temporary file (mode 0600, gone when
the process ends). Ten million 60-character lines cost ~40 MB of memory instead of ~700 MB, and
a line is read back (one ``pread``) only when it scrolls into view; the file sits in the page
cache, so that costs microseconds. Lines are stored raw (already str from the event, invalid
UTF-8 already U+FFFD) and cleaned for display on demand, so a flood costs only an encode and an
append per line. Search reads the whole log in windows: every line, not just what is held.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from array import array
from bisect import bisect_right

# A line longer than this is cut at ingest; clean_line cuts again (with a note) at display.
MAX_STORED = 16_384
SPILL_BYTES = 4 << 20  # the newest bytes kept in memory; older ones go to the spill file
WINDOW = 8 << 20  # bytes read at a time by a search
_SEG_BITS = 32  # offsets are stored mod 2**32; _segments marks where each segment begins


class LineStore:
    def __init__(self, spill_dir: str | None = None) -> None:
        self._hot = bytearray()  # bytes from _hot_base on
        self._hot_base = 0  # absolute offset of _hot[0] (= bytes already spilled)
        self._starts = array("I")  # each line's start offset, mod 2**32
        self._segments: list[int] = [0]  # first line index of each 4 GiB segment
        self._spill_dir = spill_dir
        self._file: int | None = None  # fd of the unlinked spill file, made on first spill
        self.max_len = 0  # longest stored line, in characters (for the virtual width)

    def __len__(self) -> int:
        return len(self._starts)

    @property
    def total_bytes(self) -> int:
        return self._hot_base + len(self._hot)

    @property
    def resident_bytes(self) -> int:
        """Memory held for the lines: the index and the unspilled buffer."""
        return self._starts.itemsize * len(self._starts) + len(self._hot)

    def extend(self, lines: list[str]) -> None:
        hot, starts = self._hot, self._starts
        longest = self.max_len
        for line in lines:
            if len(line) > MAX_STORED:
                line = line[:MAX_STORED]
            start = self._hot_base + len(hot)
            while start >> _SEG_BITS > len(self._segments) - 1:  # (an empty segment repeats)
                self._segments.append(len(starts))
            starts.append(start & ((1 << _SEG_BITS) - 1))
            hot += line.encode("utf-8", "replace")
            hot += b"\n"  # a separator, so a search never matches across two lines
            if len(line) > longest:
                longest = len(line)
        self.max_len = longest
        if len(hot) >= SPILL_BYTES:
            self._spill()

    def _spill(self) -> None:
        """Move the buffer (whole lines only: it always ends at a separator) to the file."""
        if self._file is None:
            with tempfile.TemporaryFile(prefix="portside-log-", dir=self._spill_dir) as fh:
                self._file = os.dup(fh.fileno())  # the unlinked file lives while the dup does
        view = memoryview(self._hot)
        written = 0
        while written < len(view):
            written += os.pwrite(self._file, view[written:], self._hot_base + written)
        view.release()
        self._hot_base += len(self._hot)
        self._hot = bytearray()

    def close(self) -> None:
        if self._file is not None:
            os.close(self._file)
            self._file = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown: the OS reclaims the fd
            self.close()

    def _abs(self, index: int) -> int:
        seg = bisect_right(self._segments, index) - 1
        return (seg << _SEG_BITS) | self._starts[index]

    def _read(self, lo: int, hi: int) -> bytes:
        """Bytes [lo, hi) of the log, from the file and/or the buffer."""
        base = self._hot_base
        if lo >= base:
            return bytes(self._hot[lo - base:hi - base])
        assert self._file is not None
        cold = os.pread(self._file, min(hi, base) - lo, lo)
        return cold + bytes(self._hot[:hi - base]) if hi > base else cold

    def __getitem__(self, index: int) -> str:
        if index < 0:
            index += len(self._starts)
        if not 0 <= index < len(self._starts):
            raise IndexError(index)
        start = self._abs(index)
        end = self._abs(index + 1) if index + 1 < len(self._starts) else self.total_bytes
        return self._read(start, end - 1).decode("utf-8", "replace")

    def _line_of(self, pos: int) -> int:
        """The line holding absolute byte ``pos`` (binary search on the index)."""
        lo, hi = 0, len(self._starts)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._abs(mid) <= pos:
                lo = mid
            else:
                hi = mid
        return lo

    def _windows(self, lo: int, hi: int, backwards: bool) -> list[tuple[int, int]]:
        out = []
        at = lo
        while at < hi:
            out.append((at, min(hi, at + WINDOW)))
            at += WINDOW
        return out[::-1] if backwards else out

    def _search(self, pat: bytes, lower: bool, lo: int, hi: int, backwards: bool) -> int:
        """Absolute offset of a match starting in [lo, hi), or -1. Windows overlap by the
        pattern's length so a match across a window edge is found."""
        extra = len(pat) - 1
        for a, b in self._windows(lo, hi, backwards):
            data = self._read(a, min(self.total_bytes, b + extra))
            if lower:
                data = data.lower()
            pos = data.rfind(pat, 0, b - a + extra) if backwards else data.find(pat)
            if 0 <= pos < b - a:
                return a + pos
        return -1

    def find(self, needle: str, start_line: int = 0, backwards: bool = False) -> int | None:
        """Index of the next line containing ``needle`` (case-insensitive when it is lower
        case), searching from ``start_line`` and wrapping; None when absent."""
        if not needle or not self._starts:
            return None
        lower = needle == needle.lower()
        pat = needle.encode("utf-8")
        n = len(self._starts)
        start_line = max(0, min(start_line, n - 1))
        offset = self._abs(start_line)
        total = self.total_bytes
        if backwards:
            pos = self._search(pat, lower, 0, offset, True)
            if pos < 0:
                pos = self._search(pat, lower, offset, total, True)
        else:
            pos = self._search(pat, lower, offset, total, False)
            if pos < 0:
                pos = self._search(pat, lower, 0, offset, False)
        if pos < 0:
            return None
        return self._line_of(pos)
