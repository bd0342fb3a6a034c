"""Runs on remote hosts over SSH, behind the runner's Executor seam (the system OpenSSH client).

Per host and session, a keeper (core/run/shipped/ssh_keeper.py) holds a connection of its own for the
whole session: it creates ``<base>/.portside-<session>/``, says whether the host has rsync, and
removes the folder when that connection ends (portside's close, portside killed, the link
lost), unless --keep-remote. Per run, the run's folder (the candidate's workspace or the
pristine reference copy) reaches ``runs/<run>/`` there one of two ways:
- rsync, when both sides have it: into a mirror of the role, ``tree/<role>/``, that lives for
  the session, so a second attempt sends only what changed; the run's folder is then hard links
  to the mirror (``cp -al``; the run writing a file in place changes the mirror too, which is
  why every sync compares checksums, not sizes and times: the next run starts from the tree);
- else a tar stream of the whole folder, every run (PORTSIDE_SSH_TRANSPORT=tar forces it).
The probe and the host-side agent (core/run/shipped/ssh_runner.py) go the first time; then the agent
runs the command there.
One connection carries everything back: output lines as they are, probe record lines behind a
per-run random marker (written here into the local probe files the runner already tails), the
exit status last. A connection that ends without the exit status is ``connection-lost``; one
that goes silent (a cut link, a frozen host: TCP never closes) is ended by ssh's ServerAlive
probes within LINK_LOST_S. The agent's watchdog kills the run's process group when its
connection closes, or when portside's pings stop for AGENT_HEARTBEAT_S; and the session's end
reaches the host once more to stop any agent still alive (the keeper does it, or a last
connection when the keeper's went too). Kill requests travel as control lines. Nothing of portside's environment goes to the host but what the run's
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
import shutil
import signal
import subprocess
import tarfile
import tempfile
import threading
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from portside.core.log.ssh_hosts import Host, parse_host
from portside.core.probe import shipped_files
from portside.core.safety.secrets import scrub_env

CONNECT_TIMEOUT_S = 10
PING_S = 2.0  # portside's pings to each agent and keeper
# ssh gives up on a connection whose server has not answered SERVER_ALIVE_COUNT probes sent
# SERVER_ALIVE_S apart: a silent link is connection-lost after about LINK_LOST_S.
SERVER_ALIVE_S = 2
SERVER_ALIVE_COUNT = 4
LINK_LOST_S = SERVER_ALIVE_S * (SERVER_ALIVE_COUNT + 1)
AGENT_HEARTBEAT_S = 15.0  # an agent without a ping for this long kills its run
HARD_KILL_S = 3.0
SKIP_DIRS = {".git", "__pycache__"}
# Never sent, even when the run's env names them: the host's own login sets these.
HOST_OWN = {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "PWD", "OLDPWD", "TMPDIR", "TERM",
            "PYTHONPATH", "PORTSIDE_PROBE_OUT", "PORTSIDE_PROBE_ROOT_PID", "_"}
ALWAYS = {"PYTHONUNBUFFERED", "PORTSIDE_SEED_OFFSET", "PORTSIDE_PROBE_NORM_EVERY"}
_PROBE = Path(__file__).resolve().parents[1] / "probe"
_AGENT = Path(__file__).resolve().parent / "shipped" / "ssh_runner.py"
_KEEPER = Path(__file__).resolve().parent / "shipped" / "ssh_keeper.py"
KEEPER_HEARTBEAT_S = 60.0  # the keeper's wait for a ping before it takes portside for gone
KEEPER_ANSWER_S = CONNECT_TIMEOUT_S + 50.0  # connecting, then a slow login and python3 start
TRANSPORTS = ("auto", "rsync", "tar")
COPY_FAILED = 97  # the run's folder could not be made from the mirror (exit status on the host)
_SSH_FAULT = re.compile(r"Permission denied|Connection (refused|timed out|closed|reset)"
                        r"|Could not resolve|No route to host|Host key verification failed"
                        r"|connection unexpectedly closed")


class RemoteError(OSError):
    """A host that cannot be used: ``reason`` is the run's outcome reason."""

    def __init__(self, reason: str, host: str, message: str) -> None:
        super().__init__(f"{host}: {message}")
        self.reason = reason
        self.host = host
        self.error_type = {"host-unreachable": "HostUnreachable", "auth-failed": "AuthFailed",
                           "connection-lost": "ConnectionLost",
                           "host-disk-full": "HostDiskFull"}.get(reason, "RemoteError")


def ssh_argv(host: Host, remote_command: str, config: Path | None = None) -> list[str]:
    return [*ssh_options(host, config), "--", host.dest, remote_command]


def ssh_options(host: Host, config: Path | None = None) -> list[str]:
    """The ssh command line up to the destination (rsync's ``-e`` takes it as it is)."""
    argv = ["ssh", "-T", "-a", "-x", "-o", "BatchMode=yes",
            "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}", "-o", f"ServerAliveInterval={SERVER_ALIVE_S}",
            "-o", f"ServerAliveCountMax={SERVER_ALIVE_COUNT}", "-o", "ClearAllForwardings=yes",
            "-o", "ForwardAgent=no", "-o", "LogLevel=ERROR"]
    if config is not None:
        argv += ["-F", str(config)]
    if host.port is not None:
        argv += ["-p", str(host.port)]
    if host.user is not None:
        argv += ["-l", host.user]
    return argv


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


def _tar(run_dir: str, cwd: Path | None, with_tools: bool) -> Any:
    def skip(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        parts = Path(info.name).parts
        return None if SKIP_DIRS.intersection(parts) else info

    fh = tempfile.TemporaryFile()  # noqa: SIM115 (the caller closes it after sending)
    with tarfile.open(fileobj=fh, mode="w") as tar:
        if with_tools:
            for name in shipped_files():  # the probe and what it loads by path beside it
                tar.add(_PROBE / name, f"probe/{name}")
            tar.add(_AGENT, "agent.py")
        if cwd is not None:
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
        if rc == COPY_FAILED:
            full = "No space left on device" in said
            self.fault = ("host-disk-full" if full else "remote-error",
                          "HostDiskFull" if full else "RemoteError",
                          f"could not make the run's folder on {self.host.spec}: {said[-300:]}")
        elif rc == 255:
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
                 keep: bool = False, python: str = "python3", transport: str | None = None
                 ) -> None:
        self.host = parse_host(host) if isinstance(host, str) else host
        self.config = ssh_config
        self.keep = keep
        self.python = python
        self.wanted = transport or os.environ.get("PORTSIDE_SSH_TRANSPORT") or "auto"
        if self.wanted not in TRANSPORTS:
            raise ValueError(f"PORTSIDE_SSH_TRANSPORT={self.wanted!r}: expected one of "
                             f"{', '.join(TRANSPORTS)}")
        name = f".portside-{re.sub(r'[^A-Za-z0-9_-]', '_', session_id)}"
        self.dir_expr = (shlex.quote(f"{self.host.base}/{name}") if self.host.base
                         else f'"$HOME"/{name}')
        self.transport: str | None = None  # decided once per keeper: "rsync" or "tar"
        self.remote_dir = ""  # the session's folder on the host, absolute (the keeper says)
        self.shipped: list[dict[str, Any]] = []  # per run: transport, bytes sent, seconds
        self._token = secrets.token_hex(8)
        self._keeper: subprocess.Popen[bytes] | None = None
        self._stop_pings = threading.Event()
        self._shipped_tools = False
        self._used = False

    @property
    def label(self) -> str:
        return self.host.spec

    def _fault(self, rc: int, err: str, doing: str) -> RemoteError:
        full = [ln.strip() for ln in err.splitlines() if "No space left on device" in ln]
        if full:
            return RemoteError("host-disk-full", self.host.spec, f"{doing}: {full[0][:300]}")
        if rc == 255 or _SSH_FAULT.search(err):
            reason = classify_failure(err)
            return RemoteError(reason, self.host.spec, f"{reason}: {_last(err)}")
        return RemoteError("remote-error", self.host.spec, f"{doing}: {_last(err)}")

    async def _keep_session(self) -> None:
        """The keeper's connection, once per session (again if it ended: the host may have
        removed the folder, so everything is sent afresh)."""
        if self._keeper is not None and self._keeper.poll() is None:
            return
        self._shipped_tools = False
        self._stop_pings.set()
        self._used = True
        # Its source is the first line on its stdin (a short line in the host's `ps`).
        boot = "import json, sys; exec(json.loads(sys.stdin.readline()))"
        command = (f"D={self.dir_expr}; exec {shlex.quote(self.python)} -c {shlex.quote(boot)} "
                   f"\"$D\" {self._token} {int(self.keep)} {KEEPER_HEARTBEAT_S:g}")
        try:
            keeper = subprocess.Popen(ssh_argv(self.host, command, self.config),
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, start_new_session=True)
        except FileNotFoundError:
            raise RemoteError("host-unreachable", self.host.spec, "no ssh client on PATH") from None
        assert keeper.stdin and keeper.stdout and keeper.stderr
        with contextlib.suppress(OSError):
            keeper.stdin.write(json.dumps(_KEEPER.read_text()).encode() + b"\n")
            keeper.stdin.flush()
        try:
            said, noisy = await asyncio.wait_for(asyncio.to_thread(_keeper_answer, keeper),
                                                 timeout=KEEPER_ANSWER_S)
        except TimeoutError:
            keeper.kill()  # which ends the thread's read too
            keeper.wait()
            raise RemoteError("host-unreachable", self.host.spec, "the host did not answer "
                              f"within {KEEPER_ANSWER_S:g} s") from None
        kind, _, where = said.partition(" ")
        if not said:
            err = (await asyncio.to_thread(keeper.stderr.read)).decode("utf-8", "replace")
            rc = await asyncio.to_thread(keeper.wait)
            raise self._fault(rc, err, "could not make the session's folder there")
        self._keeper, self.remote_dir = keeper, where
        both = kind == "rsync" and shutil.which("rsync") is not None and not noisy
        if self.wanted == "rsync" and not both:
            keeper.kill()  # its folder goes with its connection
            keeper.wait()
            why = ("the host's login prints to stdout (rsync needs a clean shell)" if noisy
                   else f"rsync is missing {'here' if kind == 'rsync' else 'on the host'}")
            raise RemoteError("remote-error", self.host.spec,
                              f"PORTSIDE_SSH_TRANSPORT=rsync, but {why}")
        self.transport = "rsync" if both and self.wanted != "tar" else "tar"
        self._stop_pings = threading.Event()
        threading.Thread(target=_ping_keeper, args=(keeper, self._stop_pings),
                         daemon=True).start()

    async def _ssh(self, remote_command: str, stdin: Any) -> tuple[int, str]:
        try:
            proc = await asyncio.create_subprocess_exec(
                *ssh_argv(self.host, remote_command, self.config), stdin=stdin,
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
        except FileNotFoundError:
            raise RemoteError("host-unreachable", self.host.spec, "no ssh client on PATH") from None
        _, err = await proc.communicate()
        return proc.returncode or 0, err.decode("utf-8", "replace")

    async def _tar_to(self, run_dir: str, cwd: Path | None) -> int:
        """tar the tools (the first time) and ``cwd`` (unless None) into the session's folder;
        returns the bytes sent."""
        archive = await asyncio.to_thread(_tar, run_dir, cwd, not self._shipped_tools)
        try:
            size = archive.seek(0, os.SEEK_END)
            archive.seek(0)
            rc, err = await self._ssh(
                f'D={shlex.quote(self.remote_dir)}; mkdir -p "$D" && tar -xf - -C "$D"', archive)
        finally:
            archive.close()
        if rc != 0:
            raise self._fault(rc, err, "could not copy the run's files there")
        self._shipped_tools = True
        return size

    async def _rsync_to(self, mirror: str, cwd: Path) -> int:
        """Bring the mirror ``tree/<role>`` to ``cwd``'s state; returns the bytes sent."""
        argv = ["rsync", "-a", "--delete", "--checksum", "--stats", "--protect-args",
                *(f"--exclude={d}" for d in sorted(SKIP_DIRS)),
                "-e", shlex.join(ssh_options(self.host, self.config)), "--",
                f"{cwd}/", f"{self.host.dest}:{self.remote_dir}/{mirror}/"]
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
        out, err = await proc.communicate()
        if proc.returncode != 0:
            raise self._fault(proc.returncode or 0, err.decode("utf-8", "replace"),
                              "could not sync the run's files there")
        sent = re.search(rb"Total bytes sent: ([\d,.]+)", out)
        return int(re.sub(rb"\D", b"", sent.group(1))) if sent else 0

    async def _ship(self, run_dir: str, cwd: Path, role: str) -> str:
        """Send what the run needs; returns the shell step that makes its folder there."""
        t0 = time.monotonic()
        if self.transport == "rsync":
            mirror = f"tree/{role}"
            sent = await self._tar_to(run_dir, None) if not self._shipped_tools else 0
            sent += await self._rsync_to(mirror, cwd)
            make = (f"mkdir -p runs && cp -al {mirror} {shlex.quote(run_dir)} "
                    f"|| exit {COPY_FAILED}; ")
        else:
            sent, make = await self._tar_to(run_dir, cwd), ""
        self.shipped.append({"run": run_dir, "transport": self.transport, "bytes": sent,
                             "seconds": time.monotonic() - t0})
        return make

    async def start(self, command: str, cwd: Path, env: dict[str, str], worker: int = 0
                    ) -> tuple[_RemoteHandle, asyncio.StreamReader]:
        local_out = Path(env["PORTSIDE_PROBE_OUT"])
        prefix = local_out.stem  # the run id: remote files are named as the local ones
        run_dir = f"runs/{prefix}"
        await self._keep_session()
        named = re.match(r"[a-z]+", prefix)  # ref3-… / cand2-…: one mirror per role
        role = named.group(0) if named else "run"
        make = await self._ship(run_dir, Path(cwd), role)
        marker = b"\x1e" + secrets.token_hex(8).encode()
        job = {"command": command, "cwd": run_dir, "env": remote_env(env), "records": "records",
               "prefix": prefix, "marker": marker.decode(), "keep": self.keep,
               "heartbeat_s": AGENT_HEARTBEAT_S}
        proc = await asyncio.create_subprocess_exec(
            *ssh_argv(self.host, f"cd {shlex.quote(self.remote_dir)} && {make}exec "
                      f"{shlex.quote(self.python)} agent.py", self.config),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, limit=1 << 22, start_new_session=True)
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(job).encode() + b"\n")
        handle = _RemoteHandle(self.host, proc, marker, local_out.parent, prefix, worker)
        return handle, handle.reader

    def close(self) -> None:
        """End the session on the host: the keeper removes its folder (unless kept); never
        raises."""
        keeper, self._keeper = self._keeper, None
        self._stop_pings.set()
        if keeper is not None:
            with contextlib.suppress(Exception):
                assert keeper.stdin is not None
                keeper.stdin.close()
            try:
                keeper.wait(timeout=CONNECT_TIMEOUT_S + 20)
            except subprocess.TimeoutExpired:
                keeper.kill()
                keeper.wait()
            if keeper.returncode == 0:
                return
        if not self._used:
            return
        with contextlib.suppress(Exception):  # the keeper's connection had ended: ask again
            subprocess.run(ssh_argv(self.host, self._sweep_command(), self.config),
                           stdin=subprocess.DEVNULL, capture_output=True,
                           timeout=CONNECT_TIMEOUT_S + 20)

    def _sweep_command(self) -> str:
        """What the keeper would have done, as one shell line: SIGTERM each of the session's
        agents still alive (its cwd the session's folder), wait for them; then, unless kept,
        remove the folder and the parents the keeper made (``.made``) while empty."""
        where = shlex.quote(self.remote_dir) if self.remote_dir else self.dir_expr
        stop = ('for f in "$D"/records/*.pid; do p=$(cat "$f" 2>/dev/null) || continue; '
                '[ "$(readlink /proc/$p/cwd 2>/dev/null)" = "$D" ] || continue; '
                'kill -TERM "$p" 2>/dev/null; n=0; while [ $n -lt 50 ] && '
                'grep -qv "^[^)]*) Z" /proc/$p/stat 2>/dev/null; do sleep 0.1; n=$((n+1)); '
                'done; done')
        if self.keep:
            return f"D={where}; {stop}"
        return (f'D={where}; {stop}; T=$(cat "$D/.made" 2>/dev/null); rm -rf -- "$D"; d=$D; '
                'while [ -n "$T" ] && [ "$d" != "$T" ]; do d=$(dirname "$d"); '
                'rmdir -- "$d" 2>/dev/null || break; done')


def _keeper_answer(keeper: subprocess.Popen[bytes]) -> tuple[str, bool]:
    """The keeper's ``rsync DIR`` / ``tar DIR`` line ('' when the connection ended first), and
    whether the host's login printed something before it (a shell that is not clean breaks
    rsync's protocol)."""
    assert keeper.stdout is not None
    noisy = False
    for raw in keeper.stdout:
        line = raw.decode("utf-8", "replace").strip()
        kind, _, where = line.partition(" ")
        if kind in ("rsync", "tar") and where.startswith("/"):
            return line, noisy
        noisy = True
    return "", noisy


def _ping_keeper(keeper: subprocess.Popen[bytes], stop: threading.Event) -> None:
    """portside is alive: a line now and then on the keeper's connection (from a thread, so a
    busy event loop or a run in progress never makes the keeper sweep the folder)."""
    while not stop.wait(PING_S) and keeper.poll() is None:
        try:
            assert keeper.stdin is not None
            keeper.stdin.write(b"\n")
            keeper.stdin.flush()
        except (OSError, ValueError):
            return


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


