"""A live run's records: where they go (``RecordOut``) and the probe files they come from
(``ProbeFiles``).

The probe writes one file a rank or probed process into the run's own folder; every tick the
new complete lines of each are read (bounded), checked against the run's seal, unpacked
(FORMAT.md) and handed on. The folder is the run's to write: a link, a FIFO, a replaced or
shrunk file, a forged or out-of-order record, a flood of files is said as a ``tamper``
record of portside's own, never read as the run's.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from portside.core.log import events as ev
from portside.core.probe import _packed
from portside.core.run import seal
from portside.core.run.batching import Batcher
from portside.core.safety.terminal_text import decode_line

# A trickle of records is held into fewer, bigger events (core/run/batching.py): a record
# waits at most RECORD_HOLD_S; the first after a quiet spell goes out at the tick.
RECORD_HOLD_S = 0.5
RECORD_BIG_BYTES = 8192  # smaller: at fast step rates records are not held for size past ~0.3 s
RECORD_READ_BYTES = 8 << 20  # read at most this much of one probe file per tick
MAX_RECORD_BYTES = 1 << 20  # a probe record line longer than this is refused, counted
MAX_TAMPER_RECORDS = 20  # tamper records kept in detail per run; the rest are counted
# The probe folder is the run's to write: listed at most MAX_PROBE_ENTRIES deep a tick, and at
# most MAX_PROBE_FILES record files read (one a rank or probed process). 161k files there held
# the loop 3 s a tick (a 20 s timeout fired at 45 s); past either bound no new file is read.
MAX_PROBE_ENTRIES = 4096
MAX_PROBE_FILES = 256
#: Record types only portside itself writes: one of them in a run's probe file is forged.
RESERVED_TYPES = frozenset({"metric", "observed", "tamper", "probe-error"})


class RecordConsumer(Protocol):
    """Who the records go to besides the log (the runner's, set by its consumer)."""

    keep_records: bool
    on_records: Callable[[str, list[dict[str, Any]]], None] | None


class RecordOut:
    """Every record of the run, the probe's and portside's own, batched into ``run.record``
    events and handed to the consumer's ``on_records`` (the live judge) as they go out."""

    def __init__(self, emit: Callable[[ev.Event], object], session_id: str, run_id: str,
                 consumer: RecordConsumer, *, tick_s: float) -> None:
        self.emit = emit
        self.sid = session_id
        self.run_id = run_id
        self.consumer = consumer
        self.pending: Batcher[dict[str, Any]] = Batcher(
            hold_s=RECORD_HOLD_S, tick_s=tick_s, big_bytes=RECORD_BIG_BYTES)
        self.records: list[dict[str, Any]] = []  # kept only while the consumer keeps none
        self.record_count = 0
        self.rank0_steps = 0

    def add(self, recs: list[dict[str, Any]], nbytes: int) -> None:
        first = self.pending.add(recs, time.monotonic(), nbytes)
        if first:
            self._send(first)

    def flush(self, force: bool = True) -> None:
        if self.pending and (force or self.pending.due(time.monotonic())):
            self._send(self.pending.take())

    def _send(self, recs: list[dict[str, Any]]) -> None:
        self.record_count += len(recs)
        self.rank0_steps += sum(1 for r in recs if r.get("type") == "step" and r.get("rank", 0) == 0)
        if self.consumer.keep_records:
            self.records.extend(recs)
        self.emit(ev.RunRecord(session_id=self.sid, run_id=self.run_id, records=recs))
        if self.consumer.on_records is not None:
            self.consumer.on_records(self.run_id, recs)


class ProbeFiles:
    """The run's probe folder, tailed: the rank-0 file ``out`` and its siblings."""

    def __init__(self, out: Path, add_records: Callable[[list[dict[str, Any]], int], None],
                 key: bytes | None = None, *, started: float | None = None) -> None:
        self.out = out
        self.add_records = add_records
        self.key = key  # the run's seal (core/run/seal.py); None: records are taken unchecked
        self.offsets: dict[Path, int] = {}
        self.inodes: dict[Path, int] = {}
        self.not_files: set[Path] = set()  # probe-folder entries refused, said once each
        self.files: list[Path] = []  # the run's record files as last listed
        self.flooded = False  # the folder went past a bound: listed no more
        self.partial: dict[Path, bytes] = {}
        self.skipping: dict[Path, int] = {}  # bytes of an over-long record being dropped
        self.seqs: dict[tuple[str, Any], int] = {}  # (file, pid) → the next record's seq
        self.notes: dict[str, int] = {}  # portside's own records about the files, by type
        self.step_count = 0
        self.last_step_at = time.monotonic() if started is None else started

    def poll(self, drain: bool = False) -> bool:
        """Read complete new lines from every probe file of this run (all ranks), each checked
        against the run's seal; what fails is a ``tamper`` record, never the run's record.
        ``drain``: to the end of every file (the run is over), else one bounded read each.
        True when the run said its facts anew (its processes are then worth a look)."""
        new: list[dict[str, Any]] = []
        nbytes = 0
        for path in self._listed():
            while True:
                at = self.offsets.get(path, 0)
                for raw in self._new_lines(path):
                    rec = self._record(path, raw)
                    if rec is None:
                        continue
                    nbytes += len(raw)
                    try:  # steps packed by column (FORMAT.md): the records they stand for
                        new.extend(_packed.expand(rec))
                    except ValueError as e:
                        new.append({"type": "probe-error", "line": str(e)[:200],
                                    "file": path.name})
                if not drain or self.offsets.get(path, 0) - at < RECORD_READ_BYTES:
                    break
        steps = sum(1 for r in new if r.get("type") == "step")
        facts = [r for r in new if r.get("type") == "facts"]
        for r in facts:  # when portside read it, by its own clock (the run's `t` is its)
            r["received_at"] = time.time()
        if steps:
            self.step_count += steps
            self.last_step_at = time.monotonic()
        self.add_records(new, nbytes)
        return bool(facts)

    def end_notes(self) -> None:
        """How many records failed their check or were refused past the detailed ones."""
        said = {"tamper": ("why", "failed their check"), "probe-error": ("line", "refused")}
        for typ, n in self.notes.items():
            more = n - MAX_TAMPER_RECORDS
            if more > 0:
                key, what = said[typ]
                self.add_records([{"type": typ, "source": "portside", "t": time.time(),
                                   "count": more, "file": "", key: f"{more} more records {what}"}],
                                 200)

    def _listed(self) -> list[Path]:
        """The run's record files, sorted, from a bounded listing of its folder; once the
        folder goes past a bound it is said once and the files known by then are all read."""
        if self.flooded:
            return self.files
        found: list[Path] = []
        try:
            with os.scandir(self.out.parent) as it:
                for n, entry in enumerate(it):
                    if n >= MAX_PROBE_ENTRIES or len(found) > MAX_PROBE_FILES:
                        self.flooded = True
                        break
                    if entry.name.endswith(self.out.suffix):
                        found.append(Path(entry.path))
        except OSError:
            return self.files
        if self.flooded:
            self._tamper(self.out.parent, f"over {MAX_PROBE_ENTRIES} entries or "
                         f"{MAX_PROBE_FILES} record files in the probe folder: no new file read")
            # The rank-0 file first, listed or not yet: a flood never hides the run's own.
            found = [self.out, *sorted({*self.files, *found} - {self.out})][:MAX_PROBE_FILES]
        self.files = sorted(found)
        return self.files

    def _new_lines(self, path: Path) -> list[bytes]:
        """The complete lines added to ``path`` since the last read (at most
        RECORD_READ_BYTES a tick); a line over MAX_RECORD_BYTES is dropped as it streams."""
        if path in self.not_files:
            return []
        try:
            # Never follow a link (the run could point it at a host file portside, as root,
            # would read into evidence) nor wait on a FIFO (open() would block the loop).
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as e:
            if os.path.islink(path) or e.errno == errno.ELOOP:
                self.not_files.add(path)
                self._tamper(path, "a link in the probe folder, not a record file: not read")
            return []
        try:
            with os.fdopen(fd, "rb") as fh:
                st = os.fstat(fh.fileno())
                if not stat.S_ISREG(st.st_mode):
                    self.not_files.add(path)
                    self._tamper(path, "not a regular file in the probe folder (a FIFO, a "
                                       "device, a folder): not read")
                    return []
                at = self.offsets.get(path, 0)
                if self.inodes.setdefault(path, st.st_ino) != st.st_ino:
                    self._tamper(path, "the record file was replaced while the run wrote it")
                    self.inodes[path] = st.st_ino
                if st.st_size < at:
                    self._tamper(path, f"the record file shrank from {at} to {st.st_size} bytes")
                    at = st.st_size
                fh.seek(at)
                chunk = fh.read(RECORD_READ_BYTES)
        except OSError:
            return []
        self.offsets[path] = at + len(chunk)
        if not chunk:
            return []
        skipped = self.skipping.pop(path, None)
        if skipped is not None:
            cut = chunk.find(b"\n")
            if cut < 0:
                self.skipping[path] = skipped + len(chunk)
                return []
            self._refuse(path, skipped + cut)
            chunk = chunk[cut + 1:]
        lines = (self.partial.pop(path, b"") + chunk).split(b"\n")
        last = lines.pop()
        if len(last) > MAX_RECORD_BYTES:
            self.skipping[path] = len(last)  # never held: a 300 MB line costs nothing here
        elif last:
            self.partial[path] = last
        return lines

    def _note(self, typ: str, path: Path, **fields: Any) -> None:
        """A record of portside's own about this run's files: the first MAX_TAMPER_RECORDS of
        each type in detail, the rest counted (``end_notes`` says how many)."""
        n = self.notes[typ] = self.notes.get(typ, 0) + 1
        if n <= MAX_TAMPER_RECORDS:
            self.add_records([{"type": typ, "file": path.name, "t": time.time(), **fields}], 200)

    def _refuse(self, path: Path, size: int) -> None:
        self._note("probe-error", path,
                   line=f"record of {size} bytes refused (over {MAX_RECORD_BYTES} bytes)")

    def _tamper(self, path: Path, why: str, raw: bytes = b"") -> None:
        line = {"line": decode_line(raw[:160])} if raw else {}
        self._note("tamper", path, source="portside", why=why, **line)

    def _record(self, path: Path, raw: bytes) -> dict[str, Any] | None:
        if not raw.strip():
            return None
        if len(raw) > MAX_RECORD_BYTES:
            self._refuse(path, len(raw))
            return None
        body = raw
        if self.key is not None:
            body, why = seal.check_line(self.key, raw)
            if why:
                self._tamper(path, why, raw)
                return None
        try:
            rec = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            return {"type": "probe-error", "line": decode_line(raw)[:200], "file": path.name}
        if not isinstance(rec, dict):
            return None
        seq = rec.pop("seq", None)
        if rec.get("type") in RESERVED_TYPES:
            self._tamper(path, f"a {rec.get('type')!r} record is portside's own, never the run's",
                         raw)
            return None
        if self.key is not None:
            where = (path.name, rec.get("pid"))
            want = self.seqs.get(where, 0)
            self.seqs[where] = (seq + 1) if isinstance(seq, int) else want
            if seq != want:
                self._tamper(path, f"record {seq} where {want} was next (records dropped, "
                                   f"replayed or reordered)", raw)
                return None
        return rec
