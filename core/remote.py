"""Runs on remote hosts over SSH, behind the runner's Executor seam (the system OpenSSH client).

Per run: the run's folder (the candidate's workspace or the pristine reference copy) is sent as
a tar stream to ``<base>/.portside-<session>/runs/<run>/`` on the host, with the probe and the
host-side agent (core/remote_agent.py) the first time; then the agent runs the command there.
One connection carries everything back: output lines as they are, probe record lines behind a
per-run random marker (written here into the local probe files the runner already tails), the
exit status last. A connection that ends without the exit status is ``connection-lost``.
The agent's watchdog kills the run's process group when the connection drops; kill requests
travel as control lines. Nothing of portside's environment goes to the host but what the run's
env sets explicitly (scrubbed of secrets); agent/X11 forwarding are off; BatchMode=yes, so a
key that does not work is an error, never a password prompt.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import re
import secrets
import shlex
import signal
import subprocess
import tarfile
import tempfile
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .runner import scrub_env

CONNECT_TIMEOUT_S = 10
PING_S = 5.0
HARD_KILL_S = 3.0
SKIP_DIRS = {".git", "__pycache__"}
# Never sent, even when the run's env names them: the host's own login sets these.
HOST_OWN = {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "PWD", "OLDPWD", "TMPDIR", "TERM",
            "PYTHONPATH", "PORTSIDE_PROBE_OUT", "PORTSIDE_PROBE_ROOT_PID", "_"}
ALWAYS = {"PYTHONUNBUFFERED", "PORTSIDE_SEED_OFFSET", "PORTSIDE_PROBE_NORM_EVERY"}
_PROBE = Path(__file__).resolve().parent / "probe"
_AGENT = Path(__file__).resolve().parent / "remote_agent.py"
_ALIAS = re.compile(r"^[A-Za-z0-9_.%+-][A-Za-z0-9_.%+@-]*$")


class RemoteError(OSError):
    """A host that cannot be used: ``reason`` is the run's outcome reason."""

    def __init__(self, reason: str, host: str, message: str) -> None:
        super().__init__(f"{host}: {message}")
        self.reason = reason
        self.host = host
        self.error_type = {"host-unreachable": "HostUnreachable", "auth-failed": "AuthFailed",
                           "connection-lost": "ConnectionLost",
                           "host-disk-full": "HostDiskFull"}.get(reason, "RemoteError")


@dataclass(frozen=True)
class Host:
    spec: str  # as the user wrote it: the name shown with every fault
    dest: str  # a hostname or a Host alias of the ssh config
    user: str | None = None
    port: int | None = None
    base: str | None = None  # where session folders go (default: the remote home)


def parse_host(spec: str) -> Host:
    """``ssh://[user@]host[:port][/remote/dir]`` or a bare Host alias; ValueError names what."""
    text = spec.strip()
    if text.startswith("ssh://"):
        rest = text[len("ssh://"):]
        where, slash, path = rest.partition("/")
        user, at, hostport = where.rpartition("@")
        host, colon, port = hostport.partition(":")
        if not host or (at and not user):
            raise ValueError(f"{spec!r}: expected ssh://[user@]host[:port][/remote/dir]")
        if colon and not (port.isdigit() and 0 < int(port) < 65536):
            raise ValueError(f"{spec!r}: port {port!r} is not a number from 1 to 65535")
        if not _ALIAS.match(host) or (user and not _ALIAS.match(user)):
            raise ValueError(f"{spec!r}: {host!r} is not a host name")
        return Host(text, host, user or None, int(port) if colon else None,
                    "/" + path.rstrip("/") if slash and path.strip("/") else None)
    if not text or not _ALIAS.match(text) or text.startswith("-"):
        raise ValueError(f"{spec!r}: expected ssh://[user@]host[:port][/remote/dir] or a Host "
                         "alias of the ssh config")
    user, at, host = text.rpartition("@")
    return Host(text, host, user or None)


def ssh_argv(host: Host, remote_command: str, config: Path | None = None) -> list[str]:
    argv = ["ssh", "-T", "-a", "-x", "-o", "BatchMode=yes",
            "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}", "-o", "ServerAliveInterval=5",
            "-o", "ServerAliveCountMax=3", "-o", "ClearAllForwardings=yes",
            "-o", "ForwardAgent=no", "-o", "LogLevel=ERROR"]
    if config is not None:
        argv += ["-F", str(config)]
    if host.port is not None:
        argv += ["-p", str(host.port)]
    if host.user is not None:
        argv += ["-l", host.user]
    return [*argv, "--", host.dest, remote_command]


def classify_failure(stderr: str) -> str:
    """ssh's own failure (exit 255) → an outcome reason."""
    if re.search(r"Permission denied|Host key verification failed|Too many authentication"
                 r"|no matching (host key|key exchange)", stderr):
        return "auth-failed"
    return "host-unreachable"


def _last(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "no message from ssh"


def check_host(host: Host, config: Path | None = None) -> None:
    """Connect once and run nothing: a RemoteError says why the host cannot be used."""
    try:
        done = subprocess.run(ssh_argv(host, "exit 0", config), stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=CONNECT_TIMEOUT_S + 20)
    except FileNotFoundError:
        raise RemoteError("host-unreachable", host.spec, "no ssh client on PATH") from None
    except subprocess.TimeoutExpired:
        raise RemoteError("host-unreachable", host.spec, "ssh did not answer") from None
    if done.returncode != 0:
        reason = classify_failure(done.stderr) if done.returncode == 255 else "remote-error"
        raise RemoteError(reason, host.spec, f"{reason}: {_last(done.stderr)}")


def remote_env(env: Mapping[str, str], local: Mapping[str, str] | None = None) -> dict[str, str]:
    """What goes to the host: only what the run's env sets beyond portside's own environment
    (plus the probe's settings), secrets never."""
    local = os.environ if local is None else local
    return {k: v for k, v in scrub_env(env).items()
            if k not in HOST_OWN and not k.startswith(("SSH_", "ANTHROPIC_"))
            and (k in ALWAYS or local.get(k) != v)}


def _tar(run_dir: str, cwd: Path, with_tools: bool) -> Any:
    def skip(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        parts = Path(info.name).parts
        return None if SKIP_DIRS.intersection(parts) else info

    fh = tempfile.TemporaryFile()  # noqa: SIM115 (the caller closes it after sending)
    with tarfile.open(fileobj=fh, mode="w") as tar:
        if with_tools:
            tar.add(_PROBE / "_probe.py", "probe/_probe.py")
            tar.add(_PROBE / "inject" / "sitecustomize.py", "probe/inject/sitecustomize.py")
            tar.add(_PROBE / "trace.py", "probe/trace.py")  # trace mode (portside localize)
            tar.add(_AGENT, "agent.py")
        tar.add(cwd, run_dir, filter=skip)
    fh.seek(0)
    return fh


_LIVE: set[_RemoteHandle] = set()


@atexit.register
def _drop_connections() -> None:
    """portside exiting closes its connections: each host's watchdog then kills its run."""
    for handle in list(_LIVE):
        with contextlib.suppress(ProcessLookupError):
            handle.proc.kill()


class _RemoteHandle:
    def __init__(self, host: Host, proc: asyncio.subprocess.Process, marker: bytes,
                 local_dir: Path, prefix: str, worker: int = 0) -> None:
        self.host = host
        self.worker = worker  # a slice's host index: files and lines of workers 1.. are tagged
        self.proc = proc
        self.pid = proc.pid
        self.marker = marker
        self.local_dir = local_dir
        self.prefix = prefix
        self.reader = asyncio.StreamReader(limit=1 << 20)
        self.code: int | None = None
        self.fault: tuple[str, str, str] | None = None
        self.stderr: deque[str] = deque(maxlen=20)
        self._files: dict[str, int] = {}
        self._demux = asyncio.create_task(self._read())
        self._errs = asyncio.create_task(self._read_stderr())
        self._ping = asyncio.create_task(self._pinger())
        _LIVE.add(self)

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        head = self.marker + b" "
        try:
            while True:
                try:
                    raw = await self.proc.stdout.readline()
                except ValueError:
                    raw = await self.proc.stdout.read(1 << 20)
                if not raw:
                    break
                if raw.startswith(head):
                    self._control(raw[len(head):].rstrip(b"\n"))
                elif self.worker:
                    self.reader.feed_data(b"[w%d] " % self.worker + raw)
                else:
                    self.reader.feed_data(raw)
        finally:
            for fd in self._files.values():
                os.close(fd)
            self._files.clear()
            self.reader.feed_eof()

    def _control(self, line: bytes) -> None:
        kind, _, rest = line.partition(b" ")
        if kind == b"X":
            with contextlib.suppress(ValueError):
                self.code = int(rest)
        elif kind == b"R":
            name, _, record = rest.partition(b" ")
            text = name.decode("ascii", "replace")
            # The host names the file: only this run's record files, inside the probe folder.
            if "/" in text or not text.startswith(self.prefix) or not text.endswith(".jsonl"):
                return
            if self.worker:  # run.rank4.jsonl of worker 1 → run.w1.rank4.jsonl: no collisions
                text = f"{self.prefix}.w{self.worker}{text[len(self.prefix):]}"
            fd = self._files.get(text)
            if fd is None:
                fd = os.open(self.local_dir / text, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                self._files[text] = fd
            os.write(fd, record + b"\n")

    async def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        async for raw in self.proc.stderr:
            self.stderr.append(raw.decode("utf-8", "replace").rstrip())

    async def _pinger(self) -> None:
        while self.proc.returncode is None:
            await asyncio.sleep(PING_S)
            self._send(b"ping\n")

    def _send(self, data: bytes) -> None:
        stdin = self.proc.stdin
        if stdin is None or stdin.is_closing() or self.proc.returncode is not None:
            return
        with contextlib.suppress(Exception):
            stdin.write(data)

    async def wait(self) -> int:
        rc = await self.proc.wait()
        self._ping.cancel()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._demux), timeout=5)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._errs), timeout=1)
        _LIVE.discard(self)
        if self.code is not None:
            return self.code
        said = " | ".join(self.stderr) or "no message"
        if rc == 255:
            self.fault = ("connection-lost", "ConnectionLost",
                          f"connection to {self.host.spec} lost mid-run (ssh: {said[-300:]})")
        else:
            self.fault = ("crashed", "RemoteAgentFailed",
                          f"the portside agent on {self.host.spec} ended with {rc}: {said[-300:]}")
        return 255

    def kill_all(self, sig: int) -> None:
        if self.proc.returncode is not None:
            return
        self._send(f"kill {int(sig)}\n".encode())
        if sig == signal.SIGKILL:
            # Closing our end is the watchdog's cue too; a hung connection is cut after a while.
            if self.proc.stdin is not None:
                with contextlib.suppress(Exception):
                    self.proc.stdin.close()
            asyncio.get_running_loop().call_later(HARD_KILL_S, self._cut)

    def _cut(self) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()


class SSHExecutor:
    """An Executor that runs every command of one session on one host."""

    def __init__(self, host: Host | str, session_id: str, *, ssh_config: Path | None = None,
                 keep: bool = False, python: str = "python3") -> None:
        self.host = parse_host(host) if isinstance(host, str) else host
        self.config = ssh_config
        self.keep = keep
        self.python = python
        name = f".portside-{re.sub(r'[^A-Za-z0-9_-]', '_', session_id)}"
        self.dir_expr = (shlex.quote(f"{self.host.base}/{name}") if self.host.base
                         else f'"$HOME"/{name}')
        self._shipped_tools = False
        self._used = False

    @property
    def label(self) -> str:
        return self.host.spec

    async def _ssh(self, remote_command: str, stdin: Any) -> tuple[int, str]:
        try:
            proc = await asyncio.create_subprocess_exec(
                *ssh_argv(self.host, remote_command, self.config), stdin=stdin,
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
        except FileNotFoundError:
            raise RemoteError("host-unreachable", self.host.spec, "no ssh client on PATH") from None
        _, err = await proc.communicate()
        return proc.returncode or 0, err.decode("utf-8", "replace")

    async def _ship(self, run_dir: str, cwd: Path) -> None:
        archive = await asyncio.to_thread(_tar, run_dir, cwd, not self._shipped_tools)
        try:
            rc, err = await self._ssh(
                f'D={self.dir_expr}; mkdir -p "$D" && tar -xf - -C "$D"', archive)
        finally:
            archive.close()
        self._used = True
        if rc == 255:
            reason = classify_failure(err)
            raise RemoteError(reason, self.host.spec, f"{reason}: {_last(err)}")
        if rc != 0:
            full = [ln.strip() for ln in err.splitlines() if "No space left on device" in ln]
            raise RemoteError("host-disk-full" if full else "remote-error", self.host.spec,
                              f"could not copy the run's files there: "
                              f"{full[0][:300] if full else _last(err)}")
        self._shipped_tools = True

    async def start(self, command: str, cwd: Path, env: dict[str, str], worker: int = 0
                    ) -> tuple[_RemoteHandle, asyncio.StreamReader]:
        local_out = Path(env["PORTSIDE_PROBE_OUT"])
        prefix = local_out.stem  # the run id: remote files are named as the local ones
        run_dir = f"runs/{prefix}"
        await self._ship(run_dir, Path(cwd))
        marker = b"\x1e" + secrets.token_hex(8).encode()
        job = {"command": command, "cwd": run_dir, "env": remote_env(env), "records": "records",
               "prefix": prefix, "marker": marker.decode(), "keep": self.keep}
        proc = await asyncio.create_subprocess_exec(
            *ssh_argv(self.host, f"cd {self.dir_expr} && exec {shlex.quote(self.python)} "
                      "agent.py", self.config),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, limit=1 << 22, start_new_session=True)
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(job).encode() + b"\n")
        handle = _RemoteHandle(self.host, proc, marker, local_out.parent, prefix, worker)
        return handle, handle.reader

    def close(self) -> None:
        """Remove the session's folder on the host (unless kept); never raises."""
        if self.keep or not self._used:
            return
        with contextlib.suppress(Exception):
            subprocess.run(ssh_argv(self.host, f"rm -rf -- {self.dir_expr}", self.config),
                           stdin=subprocess.DEVNULL, capture_output=True,
                           timeout=CONNECT_TIMEOUT_S + 20)


class _SliceHandle:
    """Every worker's run as one: ends when all have; one failing ends the others (a slice
    with a dead worker only waits on its collectives, on hardware that costs money)."""

    def __init__(self, handles: list[_RemoteHandle]) -> None:
        self.handles = handles
        self.pid = handles[0].pid
        self.fault: tuple[str, str, str] | None = None
        self.reader = asyncio.StreamReader(limit=1 << 20)
        self._pumps = [asyncio.create_task(self._pump(h.reader)) for h in handles]
        self._eof = asyncio.create_task(self._close_when_done())

    async def _pump(self, source: asyncio.StreamReader) -> None:
        while True:
            try:
                raw = await source.readline()
            except ValueError:
                raw = await source.read(1 << 20)
            if not raw:
                return
            self.reader.feed_data(raw)

    async def _close_when_done(self) -> None:
        await asyncio.gather(*self._pumps, return_exceptions=True)
        self.reader.feed_eof()

    async def wait(self) -> int:
        first: tuple[int, _RemoteHandle] | None = None  # the first to fail is the cause
        pending = {asyncio.create_task(h.wait()): h for h in self.handles}
        while pending:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                handle, code = pending.pop(task), task.result()
                if code != 0 and first is None:
                    first = (code, handle)
                    for h in self.handles:
                        h.kill_all(signal.SIGTERM)
        if first is None:
            return 0
        self.fault = first[1].fault
        return first[0]

    def kill_all(self, sig: int) -> None:
        for h in self.handles:
            h.kill_all(sig)


class SliceExecutor:
    """One run on every host of a multi-host slice (``host1,host2,...``): the same command in
    each host's copy of the folder, with PORTSIDE_HOST_INDEX / PORTSIDE_HOST_COUNT set (e.g. for
    ``torchrun --node_rank``); every worker's output and ranks come back as one run's."""

    def __init__(self, executors: list[SSHExecutor]) -> None:
        self.executors = executors

    @property
    def label(self) -> str:
        return ",".join(ex.label for ex in self.executors)

    async def start(self, command: str, cwd: Path, env: dict[str, str]
                    ) -> tuple[_SliceHandle, asyncio.StreamReader]:
        n = len(self.executors)
        started = await asyncio.gather(*(
            ex.start(command, cwd, {**env, "PORTSIDE_HOST_INDEX": str(i),
                                    "PORTSIDE_HOST_COUNT": str(n)}, worker=i)
            for i, ex in enumerate(self.executors)), return_exceptions=True)
        handles = [h for h, _ in (s for s in started if not isinstance(s, BaseException))]
        failed = [s for s in started if isinstance(s, BaseException)]
        if failed:
            for h in handles:  # a slice is all its workers or none
                h.kill_all(signal.SIGKILL)
            raise failed[0]
        handle = _SliceHandle(handles)
        return handle, handle.reader

    def close(self) -> None:
        for ex in self.executors:
            ex.close()


def parse_hosts(spec: str) -> tuple[Host, ...]:
    """One host, or a comma-separated slice of them."""
    parts = [p.strip() for p in spec.split(",")]
    if any(not p for p in parts):
        raise ValueError(f"{spec!r}: an empty host in the list")
    hosts = tuple(parse_host(p) for p in parts)
    if len(set(hosts)) != len(hosts):
        raise ValueError(f"{spec!r}: a host is named twice")
    return hosts
