"""Starts reference and candidate runs with the probe injected, and watches them.

A run is the user's own shell command, unchanged, in its own process group. While it runs, its
output lines are batched into ``run.output`` events and the probe's JSONL records (plus metrics
parsed from output lines) into ``run.record`` events. It is killed, with every process it
started, on the wall limit, on a stall (no new step record and no output line for S seconds), on
abort, and when portside exits. The end is classified: exit code, signal, OOM, traceback,
timeout, stall.

What a live run is watched by, one module each: its output lines (``watch_output.py``), its
probe files and the records that go out (``watch_records.py``), its processes seen from
outside (``watch_outside.py``), its disk (``watch_disk.py``); ``_Watch`` here ties them to the
run's process, its limits and its end.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import copy
import os
import re
import shutil
import signal
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from portside.core.log import events as ev
from portside.core.log.bus import RecordingFailed
from portside.core.probe import inject_env, probe_dir
from portside.core.run import seal
from portside.core.run.sandbox import Sandbox
from portside.core.run.watch_disk import DiskWatch
from portside.core.run.watch_output import OutputTap
from portside.core.run.watch_outside import OutsideView
from portside.core.run.watch_records import ProbeFiles, RecordOut
from portside.core.safety.secrets import Redactor, redact_command, redactor_for, scrub_env

__all__ = ["scrub_env"]  # re-exported: the rules live in core/safety/secrets.py

OUTPUT_BATCH_S = 0.1  # the tick: output is flushed and probe files polled this often
KILL_GRACE_S = 1.0

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


class _Watch:
    """One live run, watched until it ends: its output (watch_output.py), its probe files
    and the records that go out (watch_records.py), its processes seen from outside
    (watch_outside.py) and its disk (watch_disk.py); here the limits, the end and its
    classification."""

    def __init__(self, runner: Runner, spec: RunSpec, out: Path,
                 redact: Redactor | None = None, key: bytes | None = None) -> None:
        self.runner = runner
        self.spec = spec
        self.out = out
        started = time.monotonic()
        self.records = RecordOut(runner.emit, runner.session_id, spec.run_id, runner,
                                 tick_s=OUTPUT_BATCH_S)
        add = self.records.add
        self.output = OutputTap(runner.emit, runner.session_id, spec.run_id, spec.patterns, add,
                                tick_s=OUTPUT_BATCH_S, redact=redact, started=started)
        self.probe = ProbeFiles(out, add, key, started=started)
        # Where a sandboxed run can write: a runtime mapped from there is its own, not the
        # host's (observe.py). An unconfined run is the user's own command, not held to it.
        sandbox = getattr(runner.executor, "sandbox", None)
        # Its tmpfs mounts need no naming: a file there is not the host's file at that path.
        self.outside = OutsideView(add, (
            (os.path.realpath(spec.cwd), *sandbox.writable, os.path.realpath(out.parent))
            if sandbox is not None else ()))
        self.disk = DiskWatch(spec.cwd)
        self.sink_error: Exception | None = None

    @property
    def last_activity(self) -> float:
        """The last output line or new step record: a run with neither for stall_s stalled."""
        return max(self.output.last_line_at, self.probe.last_step_at)

    def _poll_records(self, drain: bool = False) -> None:
        if self.probe.poll(drain):
            self.outside.soon()

    def _observe(self, handle: Handle, final: bool = False) -> None:
        """Read the run's processes from outside (local runs): what they mapped and opened."""
        if isinstance(handle, _LocalHandle):
            self.outside.look(handle.live, final)  # remember() read them this tick

    def _end_integrity(self, handle: Handle) -> None:
        """The run's last word on its evidence: what was seen of it from outside, how many
        records failed their check or were refused past the detailed ones."""
        self._observe(handle, final=True)
        self.probe.end_notes()

    def _publish(self, fn: Callable[..., None], *args: Any) -> None:
        """Hand output to the sink; a sink that fails (the store cannot record) is noted once,
        the run is stopped by the watch loop, and reading goes on regardless."""
        if self.sink_error is not None:
            return
        try:
            fn(*args)
        except Exception as exc:  # whatever the sink raises, the pipe must keep draining
            self.sink_error = exc

    async def _ticker(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=OUTPUT_BATCH_S)
            self._publish(self.output.flush, False)
            self._publish(self._poll_records)
            self._publish(self.records.flush, False)

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
        reader = asyncio.create_task(
            self.output.read(stream, lambda line: self._publish(self.output.on_line, line)))
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
                if why := self._past_limit(handle, abort.is_set(), t0):
                    reason = why
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
        self._last_word(handle)
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

    def _past_limit(self, handle: Handle, aborted: bool, t0: float) -> str:
        """Why the run must be stopped now, the first that holds; "": it goes on."""
        spec, now = self.spec, time.monotonic()
        if aborted:
            return "aborted"
        if spec.timeout_s and now - t0 > spec.timeout_s:
            return "timeout"
        if spec.stall_s and now - self.last_activity > spec.stall_s:
            return "stalled"
        if self.sink_error is not None:
            return "recording-failed"  # nothing of the run could be kept: stop it
        if isinstance(handle, _LocalHandle) and self.disk.full(now):
            return "resource-limit"
        return ""

    def _last_word(self, handle: Handle) -> None:
        """Everything the ended run left, out in order: the held output, the probe files to
        their end, the capped metrics' newest points, the evidence, the output's tail."""
        self._publish(self.output.flush)
        self._publish(self._poll_records, True)
        self._publish(self.output.flush_held_metrics)
        self._publish(self._end_integrity, handle)
        self._publish(self.records.flush)
        self._publish(self.output.flush_tail)
        if self.sink_error is not None:
            raise RecordingFailed(f"run {self.spec.run_id} stopped: {self.sink_error}") \
                from self.sink_error

    async def _terminate(self, handle: Handle, waiter: asyncio.Task[int]) -> None:
        handle.kill_all(signal.SIGTERM)  # the probe flushes its records on SIGTERM
        try:
            await asyncio.wait_for(asyncio.shield(waiter), timeout=KILL_GRACE_S)
        except TimeoutError:
            handle.kill_all(signal.SIGKILL)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(waiter), timeout=5)

    def _classify(self, code: int | None, sig: int | None, reason: str, wall: float) -> RunResult:
        tail = list(self.output.tail)
        err_type, err_msg = parse_traceback(tail)
        text = "\n".join(tail)
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
                    said = [line.strip() for line in tail if line.strip()]
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
        files = [str(p) for p in self.probe.files
                 if p.name.startswith(self.out.stem) and os.path.lexists(p)]
        return RunResult(
            run_id=self.spec.run_id,
            exit_code=code,
            signal=sig,
            reason=reason,
            wall_s=wall,
            records=self.records.records,
            tail=list(self.output.tail),
            error_type=et,
            error_message=em,
            probe_files=files,
            record_count=self.records.record_count,
            rank0_steps=self.records.rank0_steps,
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
