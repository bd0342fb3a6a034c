"""A run's own subreaper, for runs outside the sandbox (Linux): ``python -I -S reaper.py ARGV``.

It becomes a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``), so whatever the command
starts, even what ``setsid()``s or double-forks, stays below it instead of escaping to init.
When the command exits, everything left below it is killed and reaped, and it exits with the
command's status (killed by a signal: by the same signal). SIGTERM, SIGINT and SIGHUP are
left to the command (the runner signals the whole group). When portside itself goes without
cleaning up (SIGKILL, a crash), the reaper is handed to another parent: it sees that within
PARENT_POLL_S, sends the command SIGTERM, and kills what is left ORPHAN_GRACE_S later, so no
run outlives the portside that started it (a sandboxed run has bwrap's --die-with-parent).
Standard library only; run with ``-I -S`` so the probe's sitecustomize does not load in it.
Where prctl is missing it just runs the command and cleans up what it can still see.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

PARENT_POLL_S = 0.5
ORPHAN_GRACE_S = 2.0


def _subreaper() -> bool:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def _descendants(root: int) -> list[int]:
    """Every process below ``root`` (from /proc: no third-party modules here)."""
    children: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(name))
    out: list[int] = []
    todo = [root]
    while todo:
        for kid in children.get(todo.pop(), []):
            out.append(kid)
            todo.append(kid)
    return out


def _sweep() -> None:
    """Kill and reap everything below us until nothing is left (bounded)."""
    me = os.getpid()
    for _ in range(200):
        for pid in _descendants(me):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            return  # no children left
        signal.sigtimedwait([signal.SIGCHLD], 0.01)


def main(argv: list[str]) -> int:
    if not argv:
        sys.stderr.write("usage: reaper.py COMMAND [ARGS...]\n")
        return 2
    _subreaper()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # ours is to clean up; the command decides
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])
    pid = os.fork()
    if pid == 0:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGCHLD])
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        try:
            os.execvp(argv[0], argv)
        except OSError as exc:
            sys.stderr.write(f"{argv[0]}: {exc.strerror}\n")
            os._exit(127)
    parent, orphaned_at = os.getppid(), 0.0
    while True:
        try:
            done, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            status = 0
            break
        except InterruptedError:
            continue
        if done == pid:
            break  # other children are orphans reparented to us: the sweep takes them
        if done:
            continue
        if not orphaned_at and os.getppid() != parent:
            orphaned_at = time.monotonic()  # portside is gone: its run ends with it
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        if orphaned_at and time.monotonic() - orphaned_at > ORPHAN_GRACE_S:
            _sweep()  # the command too: it is reaped there
            return 128 + signal.SIGKILL
        signal.sigtimedwait([signal.SIGCHLD], PARENT_POLL_S)
    _sweep()
    if os.WIFSIGNALED(status):
        # End the way the command ended, so the runner sees the signal (no core file).
        import resource

        termsig = os.WTERMSIG(status)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(termsig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [termsig])
        os.kill(os.getpid(), termsig)
        return 128 + termsig
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
