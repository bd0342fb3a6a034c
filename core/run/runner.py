"""Starts reference and candidate runs with the probe injected, and watches them.

A run is the user's own shell command, unchanged, in its own process group. While it runs, its
output lines are batched into ``run.output`` events and the probe's JSONL records (plus metrics
parsed from output lines) into ``run.record`` events. It is killed, with every process it
started, on the wall limit, on a stall (no new step record and no output line for S seconds), on
abort, and when portside exits. The end is classified: exit code, signal, OOM, traceback,
timeout, stall.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import copy
import errno
import json
import os
import re
import shutil
import signal
import stat
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from portside.core.log import events as ev
from portside.core.log.bus import RecordingFailed
from portside.core.probe import _packed, inject_env, probe_dir
from portside.core.run import observe, seal
from portside.core.run.batching import Batcher
from portside.core.run.sandbox import Sandbox
from portside.core.safety.secrets import Redactor, redact_command, redactor_for, scrub_env
from portside.core.safety.terminal_text import decode_line

__all__ = ["scrub_env"]  # re-exported: the rules live in core/safety/secrets.py

OUTPUT_BATCH_S = 0.1  # the tick: output is flushed and probe files polled this often
OUTPUT_BATCH_LINES = 2000  # a batch this long goes out at once
# A trickle is held into fewer, bigger events (core/run/batching.py): a line waits at most
# OUTPUT_HOLD_S, a record RECORD_HOLD_S; the first after a quiet spell goes out at the tick.
OUTPUT_HOLD_S = 1.0
OUTPUT_BIG_BYTES = 16384
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
# Output-parsed points kept per metric a run: the first ones, then only the newest, held and
# recorded at the end with how many were left out (the goal test reads the last value; 3M
# matching lines were 3M records, GBs of memory and database).
MAX_METRIC_POINTS = 10_000
# Stored output per run: the first OUTPUT_HEAD_BYTES as they come, then only a count, and the
# last OUTPUT_TAIL_LINES lines at the end (every line is still read, matched and judged).
OUTPUT_HEAD_BYTES = 32 << 20
OUTPUT_TAIL_LINES = 2000
DISK_RESERVE_BYTES = 1 << 30  # a run is stopped when its disk's free space falls below this
DISK_CHECK_S = 1.0
OBSERVE_EVERY_S = 1.0  # how often the run's processes are read from outside (core/run/observe.py)
#: Record types only portside itself writes: one of them in a run's probe file is forged.
RESERVED_TYPES = frozenset({"metric", "observed", "tamper", "probe-error"})
KILL_GRACE_S = 1.0
TAIL_LINES = 200
MAX_LINE_BYTES = 1 << 20  # an output line is kept whole up to here, then cut visibly

_EXC_NAME = re.compile(r"^[A-Za-z_][\w.]*$")
_OOM = re.compile(r"out of memory|MemoryError|OOM killed|RESOURCE_EXHAUSTED", re.IGNORECASE)


@dataclass(frozen=True)
class OutputPattern:
    """A regex over output lines with a ``value`` group (and optional ``step``)."""

    name: str
    regex: Any  # an RE2 pattern (core/log/criteria.py): linear-time search on every line

    @classmethod
    def compile(cls, name: str, pattern: str) -> OutputPattern:
        from portside.core.log.criteria import compile_pattern

        rx = compile_pattern(pattern)
        if "value" not in rx.groupindex:
            raise ValueError(f"output pattern for {name!r} has no (?P<value>...) group")
        return cls(name, rx)


@dataclass
class RunSpec:
    run_id: str
    role: ev.Role
    attempt: int
    command: str
    cwd: Path
    target: str
    seed_offset: int = 0
    timeout_s: float | None = None
    stall_s: float | None = None
    env: Mapping[str, str] | None = None  # base environment (default: os.environ), scrubbed
    patterns: list[OutputPattern] = field(default_factory=list)
    executor: Executor | None = None  # where this run executes (default: the runner's)
    max_steps: int = 0  # the probe ends the run after this many optimizer steps (0: never)
    # Runs sharing this machine: each one's OpenMP threads (torch's intra-op pool), unless its
    # environment sets them. 0: the run's own default (a core each; shared, they thrash).
    threads: int = 0
    reuse_key: str = ""  # a reference's key (core/session/reference_reuse.py), for run.started


@dataclass
class RunResult:
    run_id: str
    exit_code: int | None
    signal: int | None
    reason: str  # exit | timeout | stalled | aborted | oom | crashed | signal
    wall_s: float
    records: list[dict[str, Any]]  # empty when the runner's consumer folds them (keep_records)
    tail: list[str]
    error_type: str = ""
    error_message: str = ""
    probe_files: list[str] = field(default_factory=list)
    record_count: int | None = None  # every record the run gave, kept or not
    rank0_steps: int | None = None

    @property
    def steps(self) -> int:
        if self.rank0_steps is not None:
            return self.rank0_steps
        return sum(1 for r in self.records if r.get("type") == "step" and r.get("rank", 0) == 0)


class Handle(Protocol):
    pid: int

    async def wait(self) -> int: ...

    def kill_all(self, sig: int) -> None: ...


class Executor(Protocol):
    """Where runs execute. Local now; SSH to a TPU VM or SkyPilot later, behind this seam."""

    async def start(
        self, command: str, cwd: Path, env: dict[str, str]
    ) -> tuple[Handle, asyncio.StreamReader]: ...


class _LocalHandle:
    def __init__(self, proc: asyncio.subprocess.Process, sandboxed: bool = False) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.pgid = proc.pid  # start_new_session: the shell (or bwrap) leads its own group
        self.sandboxed = sandboxed
        self._seen: set[int] = set()
        self.live: list[int] = []  # the run's processes at the last remember()
        _LIVE.add(self)

    def _descendants(self) -> set[int]:
        # Children that called setsid() leave the group; remember them while they are visible
        # (below the run's reaper or bwrap, where they stay even when they double-fork).
        try:
            import psutil

            self.live = [k.pid for k in psutil.Process(self.pid).children(recursive=True)]
            self._seen.update(self.live)
        except Exception:
            self.live = []
        return self._seen

    def remember(self) -> None:
        """Note the run's processes alive now (``live``; all ever seen, for the kill)."""
        self._descendants()

    async def wait(self) -> int:
        return await self.proc.wait()

    @property
    def returncode(self) -> int | None:
        """Set once the command itself exited, even while what it left behind still holds
        the output pipe open (``wait()`` returns only when the pipe closes)."""
        return self.proc.returncode

    def kill_all(self, sig: int) -> None:
        pids = self._descendants()
        if self.sandboxed and sig != signal.SIGKILL:
            # bwrap dies at once on SIGTERM and takes the namespace with it: the probe inside
            # would not flush. Ask the processes inside instead (bwrap and its pid 1 spared).
            with contextlib.suppress(Exception):
                import psutil

                inner = {c.pid for c in psutil.Process(self.pid).children()}
                pids = pids - inner - {self.pid}
        else:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pgid, sig)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    def forget(self) -> None:
        _LIVE.discard(self)


#: Unsandboxed runs start under their own subreaper (Linux), see core/run/shipped/reaper.py.
REAPER = Path(__file__).with_name("shipped") / "reaper.py"


_LIVE: set[_LocalHandle] = set()


@atexit.register
def _kill_live_runs() -> None:
    """portside exiting leaves no training process behind."""
    for handle in list(_LIVE):
        handle.kill_all(signal.SIGKILL)


class LocalExecutor:
    """Runs on this machine; inside ``sandbox`` (bubblewrap) when one is given."""

    def __init__(self, sandbox: Sandbox | None = None) -> None:
        self.sandbox = sandbox

    async def start(
        self, command: str, cwd: Path, env: dict[str, str]
    ) -> tuple[Handle, asyncio.StreamReader]:
        argv = ["/bin/sh", "-c", command]
        fds: tuple[int, ...] = ()
        if self.sandbox is not None:
            from portside.core.run import limits, seccomp

            # The filter reaches bwrap as a descriptor of its own (read to the end per start).
            fds = (os.open(seccomp.filter_path(), os.O_RDONLY | os.O_CLOEXEC),)
            # Limits: the run joins its cgroup (keyed by its probe file, for _classify) first.
            prefix = limits.start(env.get("PORTSIDE_PROBE_OUT", ""), self.sandbox.limits)
            # Its PID namespace ends every descendant.
            argv = [*prefix, *self.sandbox.wrap(argv, cwd, env, seccomp_fd=fds[0])]
        elif sys.platform.startswith("linux"):
            argv = [sys.executable, "-I", "-S", str(REAPER), *argv]
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                cwd=str(cwd),
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
                limit=1 << 20,
                pass_fds=fds,
            )
        finally:
            for fd in fds:
                os.close(fd)
        assert proc.stdout is not None
        return _LocalHandle(proc, self.sandbox is not None), proc.stdout


Emit = Callable[[ev.Event], object]


class Runner:
    """Runs one command at a time per call; emits events for one session."""

    def __init__(
        self,
        session_id: str,
        emit: Emit,
        probe_dir: Path,
        executor: Executor | None = None,
    ) -> None:
        self.session_id = session_id
        self.emit = emit
        self.probe_dir = Path(probe_dir)
        self.executor = executor or LocalExecutor()
        self._aborts: dict[str, asyncio.Event] = {}
        self.on_records: Callable[[str, list[dict[str, Any]]], None] | None = None
        # A consumer that folds every record handed to on_records sets this False: a day-long
        # run's record dicts (~2 KB each, 8M of them at 1M steps x 8 ranks) are then not held.
        self.keep_records = True

    def use_sandbox(self, sandbox: Sandbox | None) -> None:
        """Run every later command of this runner inside ``sandbox`` (local runs only); each
        run's own probe folder, and no other run's, is writable in it (see ``run``)."""
        if isinstance(self.executor, LocalExecutor):
            self.probe_dir.mkdir(parents=True, exist_ok=True)
            self.executor.sandbox = sandbox and sandbox.with_readable(
                probe_dir().parent  # the probe's own code (inject/ loads ../_probe.py)
            )

    def _executor_for(self, spec: RunSpec, run_dir: Path) -> Executor:
        """The run's executor: a sandboxed local one sees only this run's probe folder, so a
        candidate can neither read the references' records nor write into them."""
        executor = spec.executor or self.executor
        if isinstance(executor, LocalExecutor) and executor.sandbox is not None:
            own = copy.copy(executor)
            own.sandbox = executor.sandbox.with_writable(run_dir)
            return own
        return executor

    def abort(self, run_id: str) -> bool:
        flag = self._aborts.get(run_id)
        if flag is None:
            return False
        flag.set()
        return True

    async def run(self, spec: RunSpec) -> RunResult:
        # One folder per run: the run writes its records there and sees no other run's.
        run_dir = self.probe_dir / spec.run_id
        shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.mkdir(parents=True)
        out = run_dir / f"{spec.run_id}.jsonl"
        source = spec.env if spec.env is not None else os.environ
        base = scrub_env(source)
        base.setdefault("PYTHONUNBUFFERED", "1")  # lines as they happen, not at exit
        threads = 0
        if spec.threads and "OMP_NUM_THREADS" not in base:
            threads = spec.threads
            base["OMP_NUM_THREADS"] = str(threads)
        env = inject_env(base, str(out), spec.seed_offset, spec.max_steps)
        key = seal.new_key()
        env[seal.ENV] = key
        self.emit(
            ev.RunStarted(
                session_id=self.session_id,
                run_id=spec.run_id,
                role=spec.role,
                attempt=spec.attempt,
                command=redact_command(spec.command),
                target=spec.target,
                cwd=str(spec.cwd),
                seed_offset=spec.seed_offset,
                threads=threads,
                reuse_key=spec.reuse_key,
            )
        )
        watch = _Watch(self, spec, out, redactor_for(source, spec.command), key.encode())
        return await watch.run(env, self._executor_for(spec, run_dir))


class _DiskWatch:
    """Stops a run before it fills the disk under its directory (the host's, for everyone):
    a run may use the free space down to DISK_RESERVE_BYTES, or half of what was free when it
    started where that was less. Read every DISK_CHECK_S (one statvfs)."""

    def __init__(self, where: Path) -> None:
        self.where = str(where)
        self.checked = time.monotonic()
        free = self._free()
        self.reserve = None if free is None else min(DISK_RESERVE_BYTES, free // 2)
        self.why = ""

    def _free(self) -> int | None:
        try:
            st = os.statvfs(self.where)
        except OSError:
            return None
        return st.f_bavail * st.f_frsize

    def full(self, now: float) -> bool:
        if self.reserve is None or now - self.checked < DISK_CHECK_S:
            return False
        self.checked = now
        free = self._free()
        if free is None or free >= self.reserve:
            return False
        self.why = (f"the disk under {self.where} was nearly full ({free >> 20} MiB free, under "
                    f"the {self.reserve >> 20} MiB portside keeps free): the run was stopped")
        return True


class _Watch:
    """The state of one live run: output batching, record tailing, limits."""

    def __init__(self, runner: Runner, spec: RunSpec, out: Path,
                 redact: Redactor | None = None, key: bytes | None = None) -> None:
        self.runner = runner
        self.key = key  # the run's seal (core/run/seal.py); None: records are taken unchecked
        self.redact = redact if redact else None  # secrets the output must not show
        self.spec = spec
        self.out = out
        self.sid = runner.session_id
        self.pending: Batcher[str] = Batcher(hold_s=OUTPUT_HOLD_S, tick_s=OUTPUT_BATCH_S,
                                             big_bytes=OUTPUT_BIG_BYTES)
        self.pending_records: Batcher[dict[str, Any]] = Batcher(
            hold_s=RECORD_HOLD_S, tick_s=OUTPUT_BATCH_S, big_bytes=RECORD_BIG_BYTES)
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self.records: list[dict[str, Any]] = []
        self.last_activity = time.monotonic()
        self.offsets: dict[Path, int] = {}
        self.inodes: dict[Path, int] = {}
        self.not_files: set[Path] = set()  # probe-folder entries refused, said once each
        self.files: list[Path] = []  # the run's record files as last listed
        self.flooded = False  # the folder went past a bound: listed no more
        self.metric_points: dict[str, int] = {}  # output-parsed points seen, by metric
        self.metric_held: dict[str, dict[str, Any]] = {}  # the newest past the cap
        self.partial: dict[Path, bytes] = {}
        self.skipping: dict[Path, int] = {}  # bytes of an over-long record being dropped
        self.seqs: dict[tuple[str, Any], int] = {}  # (file, pid) → the next record's seq
        self.notes: dict[str, int] = {}  # portside's own records about the files, by type
        self.out_bytes = 0  # output stored so far (the head)
        self.cut_lines = self.cut_bytes = 0  # output read past the head, not stored as it came
        self.out_tail: deque[str] = deque(maxlen=OUTPUT_TAIL_LINES)
        self.sighting = observe.Sighting()
        self.observed_at = 0.0
        # Where a sandboxed run can write: a runtime mapped from there is its own, not the
        # host's (observe.py). An unconfined run is the user's own command, not held to it.
        sandbox = getattr(runner.executor, "sandbox", None)
        # Its tmpfs mounts need no naming: a file there is not the host's file at that path.
        self.writable: tuple[str, ...] = (
            (os.path.realpath(spec.cwd), *sandbox.writable, os.path.realpath(out.parent))
            if sandbox is not None else ())
        self.disk = _DiskWatch(spec.cwd)
        self.step_count = 0
        self.record_count = 0
        self.rank0_steps = 0
        self.sink_error: Exception | None = None

    def _emit(self, event: ev.Event) -> None:
        self.runner.emit(event)

    def _flush_output(self, force: bool = True) -> None:
        if self.pending and (force or self.pending.due(time.monotonic())):
            self._emit(ev.RunOutput(session_id=self.sid, run_id=self.spec.run_id,
                                    lines=self.pending.take()))

    def _flush_records(self, force: bool = True) -> None:
        if self.pending_records and (force or self.pending_records.due(time.monotonic())):
            self._send_records(self.pending_records.take())

    def _add_records(self, recs: list[dict[str, Any]], nbytes: int) -> None:
        first = self.pending_records.add(recs, time.monotonic(), nbytes)
        if first:
            self._send_records(first)

    def _send_records(self, recs: list[dict[str, Any]]) -> None:
        self.record_count += len(recs)
        self.rank0_steps += sum(1 for r in recs if r.get("type") == "step" and r.get("rank", 0) == 0)
        if self.runner.keep_records:
            self.records.extend(recs)
        self._emit(ev.RunRecord(session_id=self.sid, run_id=self.spec.run_id, records=recs))
        if self.runner.on_records is not None:
            self.runner.on_records(self.spec.run_id, recs)

    def _store_line(self, line: str, now: float) -> None:
        """Output goes to the log up to OUTPUT_HEAD_BYTES a run; past it lines are counted,
        and the last OUTPUT_TAIL_LINES are stored when the run ends (``_flush_tail``)."""
        size = len(line) + 4
        if self.cut_lines or self.out_bytes + size > OUTPUT_HEAD_BYTES:  # once cut, in order
            self.cut_lines += 1
            self.cut_bytes += len(line.encode("utf-8", "surrogateescape"))
            self.out_tail.append(line)
            return
        self.out_bytes += size
        first = self.pending.add([line], now, size)
        if first:
            self._emit(ev.RunOutput(session_id=self.sid, run_id=self.spec.run_id, lines=first))

    def _flush_tail(self) -> None:
        """The end of an output cut at the head: a line saying how much was left out, then
        the tail as it was printed."""
        if not self.cut_lines:
            return
        kept = list(self.out_tail)
        kept_bytes = sum(len(x.encode("utf-8", "surrogateescape")) for x in kept)
        gone, gone_bytes = self.cut_lines - len(kept), self.cut_bytes - kept_bytes
        note = (f"[portside: {gone} lines ({gone_bytes} bytes) of output not stored: a run keeps "
                f"its first {OUTPUT_HEAD_BYTES >> 20} MiB and its last {len(kept)} lines]")
        self._flush_output()
        self._emit(ev.RunOutput(session_id=self.sid, run_id=self.spec.run_id, lines=[note, *kept]))

    def _on_line(self, line: str) -> None:
        if self.redact is not None:
            line = self.redact(line)
        self.last_activity = now = time.monotonic()
        self._store_line(line, now)
        self.tail.append(line)
        metrics = []
        for pat in self.spec.patterns:
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
            self._add_records(metrics, 100 * len(metrics))
        if len(self.pending) >= OUTPUT_BATCH_LINES:
            self._flush_output()

    def _poll_records(self, drain: bool = False) -> None:
        """Read complete new lines from every probe file of this run (all ranks), each checked
        against the run's seal; what fails is a ``tamper`` record, never the run's record.
        ``drain``: to the end of every file (the run is over), else one bounded read each."""
        new: list[dict[str, Any]] = []
        nbytes = 0
        for path in self._probe_files():
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
        if facts:
            self.observed_at = 0.0  # read the processes at once: the claim is fresh
            for r in facts:  # when portside read it, by its own clock (the run's `t` is its)
                r["received_at"] = time.time()
        if steps:
            self.step_count += steps
            self.last_activity = time.monotonic()
        self._add_records(new, nbytes)

    def _probe_files(self) -> list[Path]:
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
        each type in detail, the rest counted (``_end_evidence`` says how many)."""
        n = self.notes[typ] = self.notes.get(typ, 0) + 1
        if n <= MAX_TAMPER_RECORDS:
            self._add_records([{"type": typ, "file": path.name, "t": time.time(), **fields}], 200)

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

    def _flush_held_metrics(self) -> None:
        """Each capped metric's newest point, saying how many before it were not kept."""
        recs = [{**rec, "thinned": self.metric_points[name] - MAX_METRIC_POINTS - 1}
                for name, rec in self.metric_held.items()]
        self.metric_held.clear()
        if recs:
            self._add_records(recs, 100 * len(recs))

    def _end_evidence(self, handle: Handle) -> None:
        """The run's last word on its evidence: what was seen of it from outside, how many
        records failed their check or were refused past the detailed ones."""
        self._observe(handle, final=True)
        said = {"tamper": ("why", "failed their check"), "probe-error": ("line", "refused")}
        for typ, n in self.notes.items():
            more = n - MAX_TAMPER_RECORDS
            if more > 0:
                key, what = said[typ]
                self._add_records([{"type": typ, "source": "portside", "t": time.time(),
                                    "count": more, "file": "", key: f"{more} more records {what}"}],
                                  200)

    def _observe(self, handle: Handle, final: bool = False) -> None:
        """Read the run's processes from outside (local runs): what they mapped and opened."""
        now = time.monotonic()
        if not final and now - self.observed_at < OBSERVE_EVERY_S:
            return
        if not isinstance(handle, _LocalHandle):
            return
        self.observed_at = now
        pids = [] if final else handle.live  # remember() read them this tick
        if not pids and not final:
            return
        if observe.sample(self.sighting, pids, self.writable) or final or self.sighting.samples == 1:
            self._add_records([self.sighting.record(time.time(), final)], 300)

    def _publish(self, fn: Callable[..., None], *args: Any) -> None:
        """Hand output to the sink; a sink that fails (the store cannot record) is noted once,
        the run is stopped by the watch loop, and reading goes on regardless."""
        if self.sink_error is not None:
            return
        try:
            fn(*args)
        except Exception as exc:  # whatever the sink raises, the pipe must keep draining
            self.sink_error = exc

    async def _read_output(self, stream: asyncio.StreamReader) -> None:
        """Read every byte the run writes, whatever the sink does: a run never blocks on a
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
            self._publish(self._on_line, line)

    async def _ticker(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=OUTPUT_BATCH_S)
            self._publish(self._flush_output, False)
            self._publish(self._poll_records)
            self._publish(self._flush_records, False)

    async def run(self, env: dict[str, str], executor: Executor) -> RunResult:
        spec = self.spec
        t0 = time.monotonic()
        abort = asyncio.Event()
        self.runner._aborts[spec.run_id] = abort
        try:
            handle, stream = await executor.start(spec.command, spec.cwd, env)
        except OSError as exc:  # a remote executor's RemoteError names its own reason
            return self._finish(None, None, getattr(exc, "reason", "crashed"), 0.0,
                                getattr(exc, "error_type", "OSError"), f"could not start: {exc}")
        stop = asyncio.Event()
        reader = asyncio.create_task(self._read_output(stream))
        ticker = asyncio.create_task(self._ticker(stop))
        waiter = asyncio.create_task(handle.wait())
        reason = "exit"
        try:
            while not waiter.done():
                done, _ = await asyncio.wait({waiter}, timeout=0.1)
                if done:
                    break
                if isinstance(handle, _LocalHandle):
                    handle.remember()
                    if handle.returncode is not None:
                        break  # the command ended; what it left running is killed below
                    self._publish(self._observe, handle)
                now = time.monotonic()
                if abort.is_set():
                    reason = "aborted"
                elif spec.timeout_s and now - t0 > spec.timeout_s:
                    reason = "timeout"
                elif spec.stall_s and now - self.last_activity > spec.stall_s:
                    reason = "stalled"
                elif self.sink_error is not None:
                    reason = "recording-failed"  # nothing of the run could be kept: stop it
                elif isinstance(handle, _LocalHandle) and self.disk.full(now):
                    reason = "resource-limit"
                else:
                    continue
                await self._terminate(handle, waiter)
                break
        except asyncio.CancelledError:
            await self._terminate(handle, waiter)
            raise
        finally:
            # Whatever the end, no process of this run outlives it (daemons, setsid children).
            handle.kill_all(signal.SIGKILL)
            if isinstance(handle, _LocalHandle):
                handle.forget()
            self.runner._aborts.pop(spec.run_id, None)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(waiter), timeout=5)  # the pipes closed
        returncode = waiter.result() if waiter.done() else getattr(handle, "returncode", None)
        try:
            await asyncio.wait_for(reader, timeout=5)
        except TimeoutError:
            reader.cancel()
        stop.set()
        await ticker
        self._publish(self._flush_output)
        self._publish(self._poll_records, True)
        self._publish(self._flush_held_metrics)
        self._publish(self._end_evidence, handle)
        self._publish(self._flush_records)
        self._publish(self._flush_tail)
        if self.sink_error is not None:
            raise RecordingFailed(f"run {spec.run_id} stopped: {self.sink_error}") from self.sink_error
        wall = time.monotonic() - t0
        fault = getattr(handle, "fault", None)  # a remote run's own end: connection lost
        if fault is not None and reason == "exit":
            return self._finish(None, None, fault[0], wall, fault[1], fault[2])
        code, sig = (returncode, None)
        if returncode is not None and returncode < 0:
            code, sig = None, -returncode
        elif returncode is not None and returncode > 128 and reason == "exit":
            # /bin/sh reports a signalled child as 128+N.
            sig = returncode - 128
        return self._classify(code, sig, reason, wall)

    async def _terminate(self, handle: Handle, waiter: asyncio.Task[int]) -> None:
        handle.kill_all(signal.SIGTERM)  # the probe flushes its records on SIGTERM
        try:
            await asyncio.wait_for(asyncio.shield(waiter), timeout=KILL_GRACE_S)
        except TimeoutError:
            handle.kill_all(signal.SIGKILL)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(waiter), timeout=5)

    def _classify(self, code: int | None, sig: int | None, reason: str, wall: float) -> RunResult:
        err_type, err_msg = parse_traceback(list(self.tail))
        text = "\n".join(self.tail)
        from portside.core.run import (
            limits,  # a sandboxed run's cgroup counters; its cgroup goes here
        )

        # An exit 0 counts too when the kernel held the run (a fork bomb that catches EAGAIN
        # and returns): what it printed alone does not override a clean exit.
        hit = limits.finish(os.path.abspath(self.out), text,
                            clean=reason == "exit" and not (code or sig))
        if reason == "exit" and hit:
            reason, err_type = "resource-limit", err_type or "ResourceLimit"
            err_msg = f"{hit}; {err_msg}" if err_msg else hit
        elif reason == "exit":
            if sig == signal.SIGKILL and _OOM.search(text) or (code and _OOM.search(text)):
                reason = "oom"
                err_type = err_type or "OutOfMemory"
            elif sig is not None:
                reason = "signal"
                err_type = err_type or f"signal {signal.Signals(sig).name}"
            elif code:
                reason = "crashed"
                if code in (126, 127):  # the shell could not run the command at all
                    err_type = err_type or ("CommandNotFound" if code == 127 else "NotExecutable")
                if not err_msg:
                    # No traceback: the last thing the run said is the best explanation.
                    said = [line.strip() for line in self.tail if line.strip()]
                    err_msg = said[-1][:500] if said else f"exit status {code}, no output"
        elif reason == "resource-limit":  # stopped by the watch: the disk was filling
            err_type, err_msg = "ResourceLimit", self.disk.why
        elif reason == "stalled":
            err_msg = err_msg or f"no step record and no output for {self.spec.stall_s:g} s"
        elif reason == "timeout":
            err_msg = err_msg or f"ran past the wall limit of {self.spec.timeout_s:g} s"
        return self._finish(code, sig, reason, wall, err_type, err_msg)

    def _finish(
        self, code: int | None, sig: int | None, reason: str, wall: float, et: str, em: str
    ) -> RunResult:
        files = [str(p) for p in self.files
                 if p.name.startswith(self.out.stem) and os.path.lexists(p)]
        return RunResult(
            run_id=self.spec.run_id,
            exit_code=code,
            signal=sig,
            reason=reason,
            wall_s=wall,
            records=self.records,
            tail=list(self.tail),
            error_type=et,
            error_message=em,
            probe_files=files,
            record_count=self.record_count,
            rank0_steps=self.rank0_steps,
        )


def parse_traceback(lines: list[str]) -> tuple[str, str]:
    """The exception type and message of the last Python traceback in the output."""
    start = None
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith("Traceback (most recent call last)"):
            start = i
            break
    if start is None:
        return "", ""
    for line in lines[start + 1 :]:
        if line.startswith((" ", "\t")) or not line.strip():
            continue
        # The first unindented line after the frames: "pkg.SomeError: message".
        name, _, msg = line.strip().partition(":")
        if _EXC_NAME.match(name):
            return name, msg.strip()
        return "", line.strip()
    return "", ""
