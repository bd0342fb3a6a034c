"""A live run's output lines: read whatever it writes, kept and batched into ``run.output``.

Every line is read (a run never blocks on a full pipe), cut visibly past MAX_LINE_BYTES,
redacted, matched against the output patterns (metrics, as records), and stored up to
OUTPUT_HEAD_BYTES as it comes; past that only the last OUTPUT_TAIL_LINES are stored, at the
end. The last TAIL_LINES are kept for the end's classification (the traceback, the OOM).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from portside.core.log import events as ev
from portside.core.run.batching import Batcher
from portside.core.safety.terminal_text import decode_line

if TYPE_CHECKING:
    from portside.core.run.runner import OutputPattern
    from portside.core.safety.secrets import Redactor

OUTPUT_BATCH_LINES = 2000  # a batch this long goes out at once
# A trickle is held into fewer, bigger events (core/run/batching.py): a line waits at most
# OUTPUT_HOLD_S; the first after a quiet spell goes out at the tick.
OUTPUT_HOLD_S = 1.0
OUTPUT_BIG_BYTES = 16384
# Output-parsed points kept per metric a run: the first ones, then only the newest, held and
# recorded at the end with how many were left out (the goal test reads the last value; 3M
# matching lines were 3M records, GBs of memory and database).
MAX_METRIC_POINTS = 10_000
# Stored output per run: the first OUTPUT_HEAD_BYTES as they come, then only a count, and the
# last OUTPUT_TAIL_LINES lines at the end (every line is still read, matched and judged).
OUTPUT_HEAD_BYTES = 32 << 20
OUTPUT_TAIL_LINES = 2000
TAIL_LINES = 200
MAX_LINE_BYTES = 1 << 20  # an output line is kept whole up to here, then cut visibly

AddRecords = Callable[[list[dict[str, Any]], int], None]


class OutputTap:
    """One run's output: its events, its stored head and tail, its metrics."""

    def __init__(self, emit: Callable[[ev.Event], object], session_id: str, run_id: str,
                 patterns: Sequence[OutputPattern], add_records: AddRecords, *,
                 tick_s: float, redact: Redactor | None = None,
                 started: float | None = None) -> None:
        self.emit = emit
        self.sid = session_id
        self.run_id = run_id
        self.patterns = patterns
        self.add_records = add_records  # output-parsed metrics go out with the run's records
        self.redact = redact if redact else None  # secrets the output must not show
        self.pending: Batcher[str] = Batcher(hold_s=OUTPUT_HOLD_S, tick_s=tick_s,
                                             big_bytes=OUTPUT_BIG_BYTES)
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self.last_line_at = time.monotonic() if started is None else started
        self.metric_points: dict[str, int] = {}  # output-parsed points seen, by metric
        self.metric_held: dict[str, dict[str, Any]] = {}  # the newest past the cap
        self.out_bytes = 0  # output stored so far (the head)
        self.cut_lines = self.cut_bytes = 0  # output read past the head, not stored as it came
        self.out_tail: deque[str] = deque(maxlen=OUTPUT_TAIL_LINES)

    def _send(self, lines: list[str]) -> None:
        self.emit(ev.RunOutput(session_id=self.sid, run_id=self.run_id, lines=lines))

    async def read(self, stream: asyncio.StreamReader, deliver: Callable[[str], None]) -> None:
        """Read every byte the run writes, whatever ``deliver`` does: a run never blocks on a
        full pipe. A line over MAX_LINE_BYTES keeps its start, and says how much was cut."""
        held = bytearray()  # the start of a line longer than the stream's buffer
        dropped = 0
        eof = False
        while not eof:
            try:
                raw = await stream.readuntil(b"\n")
            except asyncio.IncompleteReadError as exc:
                raw, eof = exc.partial, True  # end of output: a last line without newline
                if not raw and not held:
                    break
            except asyncio.LimitOverrunError as exc:
                # readline() would drop the buffer here; take the bytes and go on.
                chunk = await stream.readexactly(exc.consumed)
                room = MAX_LINE_BYTES - len(held)
                held += chunk[:room]
                dropped += max(0, len(chunk) - room)
                continue
            if held:
                room = MAX_LINE_BYTES - len(held)
                dropped += max(0, len(raw.rstrip(b"\n")) - room)
                raw = bytes(held) + raw[:room]
                held.clear()
            line = decode_line(raw)
            if dropped:
                line += f" … [{dropped} more bytes dropped: line longer than {MAX_LINE_BYTES} bytes]"
                dropped = 0
            deliver(line)

    def on_line(self, line: str) -> None:
        if self.redact is not None:
            line = self.redact(line)
        self.last_line_at = now = time.monotonic()
        self._store_line(line, now)
        self.tail.append(line)
        metrics = []
        for pat in self.patterns:
            m = pat.regex.search(line)
            if m is None:
                continue
            try:
                value = float(m.group("value"))
            except (TypeError, ValueError):
                continue
            step = None
            if "step" in pat.regex.groupindex and m.group("step") is not None:
                with contextlib.suppress(ValueError):
                    step = int(m.group("step"))
            rec = {"type": "metric", "name": pat.name, "value": value, "step": step,
                   "source": "output", "t": time.time()}
            n = self.metric_points[pat.name] = self.metric_points.get(pat.name, 0) + 1
            if n > MAX_METRIC_POINTS:
                self.metric_held[pat.name] = rec
            else:
                metrics.append(rec)
        if metrics:
            self.add_records(metrics, 100 * len(metrics))
        if len(self.pending) >= OUTPUT_BATCH_LINES:
            self.flush()

    def _store_line(self, line: str, now: float) -> None:
        """Output goes to the log up to OUTPUT_HEAD_BYTES a run; past it lines are counted,
        and the last OUTPUT_TAIL_LINES are stored when the run ends (``flush_tail``)."""
        size = len(line) + 4
        if self.cut_lines or self.out_bytes + size > OUTPUT_HEAD_BYTES:  # once cut, in order
            self.cut_lines += 1
            self.cut_bytes += len(line.encode("utf-8", "surrogateescape"))
            self.out_tail.append(line)
            return
        self.out_bytes += size
        first = self.pending.add([line], now, size)
        if first:
            self._send(first)

    def flush(self, force: bool = True) -> None:
        if self.pending and (force or self.pending.due(time.monotonic())):
            self._send(self.pending.take())

    def flush_tail(self) -> None:
        """The end of an output cut at the head: a line saying how much was left out, then
        the tail as it was printed."""
        if not self.cut_lines:
            return
        kept = list(self.out_tail)
        kept_bytes = sum(len(x.encode("utf-8", "surrogateescape")) for x in kept)
        gone, gone_bytes = self.cut_lines - len(kept), self.cut_bytes - kept_bytes
        note = (f"[portside: {gone} lines ({gone_bytes} bytes) of output not stored: a run keeps "
                f"its first {OUTPUT_HEAD_BYTES >> 20} MiB and its last {len(kept)} lines]")
        self.flush()
        self._send([note, *kept])

    def flush_held_metrics(self) -> None:
        """Each capped metric's newest point, saying how many before it were not kept."""
        recs = [{**rec, "thinned": self.metric_points[name] - MAX_METRIC_POINTS - 1}
                for name, rec in self.metric_held.items()]
        self.metric_held.clear()
        if recs:
            self.add_records(recs, 100 * len(recs))
