"""The host side of an SSH run (shipped to the host and run there with its python3; stdlib only).

Protocol. stdin: one JSON line ``{command, cwd, env, records, prefix, marker}``, then control
lines (``ping``, ``kill N``). stdout: the run's output lines as they are, interleaved with
``<marker> R <file> <line>`` (a new line of one of the probe's record files) and, last,
``<marker> X <returncode>``. The run is ``/bin/sh -c command`` in its own process group. The
watchdog: stdin closing (the connection dropped, portside exited), no ping for the job's
``heartbeat_s`` (a link gone silent: a network cut, a frozen sshd; checked on a thread of its
own, so a write blocked on a full pipe cannot hold it up), stdout breaking, or SIGTERM/SIGHUP
(portside reaching the host again after losing the link) kills the whole group, and every
descendant seen, at once, and removes the run's folder (unless kept). While it runs, the
agent's pid is in ``records/<prefix>.pid`` so that a later connection can find it. The
session's folder is the keeper's (core/run/shipped/ssh_keeper.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time

HEARTBEAT_S = 60.0  # when the job names none
TAIL_S = 0.05
GRACE_S = 1.0
TAIL_READ_BYTES = 8 << 20  # at most this much of one record file a poll
TAIL_LINE_BYTES = 1 << 20  # a longer record line is dropped here (portside refuses it anyway)

_out = sys.stdout.buffer
_lock = threading.Lock()
_seen: set[int] = set()
_proc: subprocess.Popen[bytes] | None = None
_last_ping = time.monotonic()
_run_dir: str | None = None  # removed when the run dies with its connection (unless kept)
_pid_file: str | None = None  # records/<prefix>.pid: where a later connection finds this agent
_dying = threading.Lock()  # the first cause of death does the killing; the others wait


def _children_of(root: int) -> set[int]:
    """Every descendant of root, from /proc (children that called setsid() leave the group)."""
    parent: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read()
            parent[int(name)] = int(stat[stat.rindex(b")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    found: set[int] = set()
    todo = [root]
    while todo:
        p = todo.pop()
        for pid, pp in parent.items():
            if pp == p and pid not in found:
                found.add(pid)
                todo.append(pid)
    return found


def _kill(sig: int) -> None:
    if _proc is None:
        return
    targets = [(os.killpg, _proc.pid)] + [(os.kill, pid) for pid in list(_seen)]
    for kill, pid in targets:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            kill(pid, sig)


def _die(why: str) -> None:
    """The watchdog's end: nobody is listening, so nothing of the run may go on."""
    if not _dying.acquire(blocking=False):
        while True:  # another thread is already ending the run; it exits the process
            time.sleep(60)
    _kill(signal.SIGTERM)
    time.sleep(GRACE_S)
    _kill(signal.SIGKILL)
    if _run_dir is not None:  # the session's keeper sweeps the rest when portside is gone
        shutil.rmtree(_run_dir, ignore_errors=True)
    _drop_pid_file()
    with contextlib.suppress(OSError):
        sys.stderr.write(f"portside remote: run killed ({why})\n")
    os._exit(3)


def _drop_pid_file() -> None:
    if _pid_file is not None:
        with contextlib.suppress(OSError):
            os.unlink(_pid_file)


def _watchdog(heartbeat_s: float) -> None:
    """No ping for heartbeat_s: the link went silent without closing (a cut cable, a frozen
    sshd), so stdin never ends; the run must not go on burning the host."""
    while True:
        time.sleep(min(0.5, heartbeat_s / 4))
        if time.monotonic() - _last_ping > heartbeat_s:
            _die(f"no word from portside for {heartbeat_s:g} s")


def _on_signal(signum: int, _frame: object) -> None:
    # Already ending (maybe in this very thread, the handler interrupting _die's grace sleep:
    # waiting on our own lock there would leave the agent alive for ever): let that finish.
    if not _dying.locked():
        _die(f"signal {signal.Signals(signum).name}")


def _write(data: bytes) -> None:
    try:
        with _lock:
            _out.write(data)
            _out.flush()
    except (BrokenPipeError, OSError):
        _die("stdout closed")


def _control() -> None:
    global _last_ping
    for line in sys.stdin.buffer:
        cmd = line.split()
        if cmd[:1] == [b"ping"]:
            _last_ping = time.monotonic()
        elif cmd[:1] == [b"kill"] and len(cmd) == 2 and cmd[1].isdigit():
            _kill(int(cmd[1]))
    _die("connection closed")


def _pump(stream: object) -> None:
    for line in stream:  # type: ignore[attr-defined]
        _write(line if line.endswith(b"\n") else line + b"\n")


class _Tail:
    def __init__(self, folder: str, prefix: str, marker: bytes) -> None:
        self.folder, self.prefix, self.marker = folder, prefix, marker
        self.offsets: dict[str, int] = {}
        self.partial: dict[str, bytes] = {}
        self.skipping: set[str] = set()  # files in the middle of an over-long line

    def poll(self) -> bool:
        """Ship the complete new lines of each record file; True when one had more than a
        read's bound (the last poll repeats until none has)."""
        more = False
        try:
            names = sorted(n for n in os.listdir(self.folder)
                           if n.startswith(self.prefix) and n.endswith(".jsonl"))
        except OSError:
            return more
        for name in names:
            try:
                # As portside's own reader: never follow a link (the run could point one at a
                # file to ship as its records) nor wait on a FIFO (open() blocked this loop, so
                # the run's end was never seen); regular files only, read to a bound (a link
                # to /dev/zero never ended).
                fd = os.open(os.path.join(self.folder, name),
                             os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                with os.fdopen(fd, "rb") as fh:
                    if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                        continue
                    fh.seek(self.offsets.get(name, 0))
                    chunk = fh.read(TAIL_READ_BYTES)
            except OSError:
                continue
            if not chunk:
                continue
            more = more or len(chunk) == TAIL_READ_BYTES
            self.offsets[name] = self.offsets.get(name, 0) + len(chunk)
            if name in self.skipping:  # the rest of an over-long line
                cut = chunk.find(b"\n")
                if cut < 0:
                    continue
                self.skipping.discard(name)
                chunk = chunk[cut + 1:]
            lines = (self.partial.pop(name, b"") + chunk).split(b"\n")
            if len(lines[-1]) > TAIL_LINE_BYTES:
                self.skipping.add(name)
            elif lines[-1]:
                self.partial[name] = lines[-1]
            head = self.marker + b" R " + name.encode() + b" "
            batch = b"".join(head + raw + b"\n" for raw in lines[:-1] if raw.strip())
            if batch:
                _write(batch)
        return more


def _write_pid_file(records: str, prefix: str) -> None:
    global _pid_file
    path = os.path.join(records, prefix + ".pid")
    with contextlib.suppress(OSError), open(path, "w") as fh:
        fh.write(str(os.getpid()))
        _pid_file = path


def main() -> None:
    global _proc, _run_dir
    job = json.loads(sys.stdin.buffer.readline())
    if not job.get("keep"):
        _run_dir = os.path.abspath(job["cwd"])
    marker = job["marker"].encode()
    records = os.path.abspath(job["records"])
    os.makedirs(records, exist_ok=True)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    _write_pid_file(records, job["prefix"])
    env = dict(os.environ)
    env.update(job["env"])
    inject = os.path.abspath("probe/inject")
    # The probe first, then the host's own PYTHONPATH (portside's local one means nothing here).
    env["PYTHONPATH"] = os.pathsep.join(
        [inject, *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]])
    env["PORTSIDE_PROBE_OUT"] = os.path.join(records, job["prefix"] + ".jsonl")
    threading.Thread(target=_control, daemon=True).start()
    threading.Thread(target=_watchdog, args=(float(job.get("heartbeat_s", HEARTBEAT_S)),),
                     daemon=True).start()
    _proc = subprocess.Popen(["/bin/sh", "-c", job["command"]], cwd=os.path.abspath(job["cwd"]),
                             env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, start_new_session=True)
    pump = threading.Thread(target=_pump, args=(_proc.stdout,), daemon=True)
    pump.start()
    tail = _Tail(records, job["prefix"], marker)
    next_seen = 0.0
    while _proc.poll() is None:
        time.sleep(TAIL_S)
        tail.poll()
        now = time.monotonic()
        if now >= next_seen:
            _seen.update(_children_of(_proc.pid))
            next_seen = now + 0.5
    code = _proc.returncode
    _kill(signal.SIGKILL)  # as for a local run: nothing the run started outlives it
    pump.join(timeout=5)
    while tail.poll():
        pass
    _write(marker + b" X " + str(code).encode() + b"\n")
    _drop_pid_file()
    if not job.get("keep"):  # one copy of the folder per run: a long session must not fill the disk
        shutil.rmtree(os.path.abspath(job["cwd"]), ignore_errors=True)
        for name in os.listdir(records):
            if name.startswith(job["prefix"]):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(records, name))


if __name__ == "__main__":
    main()
