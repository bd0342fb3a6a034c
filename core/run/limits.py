"""Resource limits of one sandboxed run: processes, memory, scratch (criteria ``[sandbox]``).

Processes and memory are capped by a cgroup made for the run: cgroup v2 where this process's
cgroup hands ``pids`` and ``memory`` to its children, else the v1 ``pids`` and ``memory``
hierarchies (each under this process's own cgroup there, so the run also stays inside
whatever limits portside itself has). The run joins them itself before bubblewrap starts (a
``sh`` that writes its pid into ``cgroup.procs`` and execs): nothing it forks is ever
outside. Where no cgroup can be made (no rights), processes fall back to ``RLIMIT_NPROC``
(per real uid: the count is the user's processes now plus the limit; root is exempt from it
in the kernel, so as root without cgroups there is no process limit) and memory has none:
``RLIMIT_AS`` would break CUDA and XLA, which reserve far more address space than they use.
The private tmpfs mounts are sized by bubblewrap (``--size``), see core/run/sandbox.py.

:func:`start` gives the argv prefix for one run, :func:`finish` says which limit it hit
(from the cgroup's own counters: ``pids.events`` max, ``oom_kill``) and removes the cgroup.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import itertools
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Limits", "RunLimits", "finish", "mechanism", "start"]

V2_ROOT = Path("/sys/fs/cgroup")
V1_ROOT = Path("/sys/fs/cgroup")
_JOIN = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'
GiB = 1 << 30


@dataclass(frozen=True)
class Limits:
    """What one run may use; 0: no limit (tmp_size 0: the kernel's default, half the RAM)."""

    max_processes: int = 0  # tasks: processes and their threads
    max_memory: int = 0  # bytes, the run's tmpfs files included where a cgroup holds it
    tmp_size: int = 0  # bytes, each private tmpfs (/tmp, /dev/shm, /run, /var/tmp, home)

    @classmethod
    def from_fractions(cls, processes: int, memory: float, tmp: float) -> Limits:
        ram = ram_bytes()
        return cls(processes, int(ram * memory), int(ram * tmp))

    def describe(self) -> str:
        parts = [f"{self.max_processes} processes" if self.max_processes else "",
                 f"memory {self.max_memory / GiB:.1f} GiB" if self.max_memory else "",
                 f"each tmpfs {self.tmp_size / GiB:.1f} GiB" if self.tmp_size else ""]
        return ", ".join(p for p in parts if p) or "none"


def ram_bytes() -> int:
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


# --- where cgroups can be made ------------------------------------------------------------


def _own_cgroups() -> dict[str, str]:
    """controller (or "" for v2) -> this process's cgroup path, from /proc/self/cgroup."""
    out: dict[str, str] = {}
    try:
        text = Path("/proc/self/cgroup").read_text()
    except OSError:
        return out
    for line in text.splitlines():
        _, ctrls, path = line.split(":", 2)
        for c in ctrls.split(",") if ctrls else [""]:
            out[c] = path
    return out


def _v2_base() -> Path | None:
    """Our v2 cgroup, if it gives pids and memory to children we can make there."""
    own = _own_cgroups().get("")
    if own is None or not (V2_ROOT / "cgroup.controllers").exists():
        return None
    base = V2_ROOT / own.lstrip("/")
    try:
        enabled = (base / "cgroup.subtree_control").read_text().split()
    except OSError:
        return None
    if {"pids", "memory"} <= set(enabled) and os.access(base, os.W_OK):
        return base
    return None


def _v1_bases() -> dict[str, Path] | None:
    own = _own_cgroups()
    out: dict[str, Path] = {}
    for ctrl in ("pids", "memory"):
        root = V1_ROOT / ctrl
        if ctrl not in own or not (root / "cgroup.procs").exists():
            return None
        base = root / own[ctrl].lstrip("/")
        if not os.access(base, os.W_OK):
            return None
        out[ctrl] = base
    return out


def mechanism() -> str:
    """How limits are enforced here: "cgroup v2", "cgroup v1" or "rlimit"."""
    if _v2_base() is not None:
        return "cgroup v2"
    return "cgroup v1" if _v1_bases() is not None else "rlimit"


# --- one run --------------------------------------------------------------------------------

_SEQ = itertools.count()


def _group_name() -> str:
    return f"portside-{os.getpid()}"


@dataclass
class RunLimits:
    """The cgroups of one run (empty: rlimits only) and the argv prefix that puts it there."""

    limits: Limits
    dirs: dict[str, Path]  # "pids"/"memory" -> cgroup dir (one dir for both under v2)
    prefix: list[str]

    def hit(self) -> str:
        """The limit the run ran into ("" if none), read from the cgroup's counters."""
        pids = _counter(self.dirs.get("pids"), "pids.events", "max")
        if pids:
            return (f"the run hit [sandbox] max_processes = {self.limits.max_processes}"
                    f" ({pids} fork(s) refused)")
        mem = self.dirs.get("memory")
        oom = _counter(mem, "memory.events", "oom_kill") or \
            _counter(mem, "memory.oom_control", "oom_kill")
        if oom:
            return (f"the run hit [sandbox] max_memory_fraction: {self.limits.max_memory / GiB:.2f}"
                    f" GiB ({oom} process(es) killed by the kernel's OOM killer)")
        return ""

    def remove(self) -> None:
        for d in set(self.dirs.values()):
            _rmdir(d)


def _counter(d: Path | None, name: str, key: str) -> int:
    if d is None:
        return 0
    try:
        text = (d / name).read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        k, _, v = line.partition(" ")
        if k == key and v.strip().isdigit():
            return int(v)
    return 0


def _rmdir(d: Path) -> None:
    for _ in range(50):  # killed tasks leave their cgroup as they exit: a moment
        try:
            d.rmdir()
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                return  # gone, or still holding another run's cgroup
            time.sleep(0.02)


def _sweep(parent: Path) -> None:
    """Remove the cgroups a portside process that is gone left behind (killed with -9)."""
    with contextlib.suppress(OSError):
        for d in parent.glob("portside-*"):
            pid = d.name.split("-", 1)[1]
            if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                for run in d.iterdir():
                    if run.is_dir():
                        _rmdir(run)
                _rmdir(d)


def _make(base: Path, limits: Limits, files: dict[str, int]) -> Path:
    _sweep(base)
    group = base / _group_name()
    group.mkdir(exist_ok=True)
    run = group / f"run-{next(_SEQ)}"
    run.mkdir()
    for name, value in files.items():
        if value and (run / name).exists():
            (run / name).write_text(str(value))
    return run


def _cgroups(limits: Limits) -> dict[str, Path]:
    v2 = _v2_base()
    if v2 is not None:
        d = _make(v2, limits, {"pids.max": limits.max_processes, "memory.max": limits.max_memory})
        return {"pids": d, "memory": d}
    v1 = _v1_bases()
    if v1 is None:
        return {}
    out = {"pids": _make(v1["pids"], limits, {"pids.max": limits.max_processes})}
    try:
        out["memory"] = _make(v1["memory"], limits, {
            "memory.limit_in_bytes": limits.max_memory,
            "memory.memsw.limit_in_bytes": limits.max_memory})  # no swapping past it either
    except OSError:
        _rmdir(out.pop("pids"))
        raise
    return out


def _nproc_prefix(limits: Limits) -> list[str]:
    """RLIMIT_NPROC counts every task of the real uid: the user's count now plus the limit."""
    prlimit = shutil.which("prlimit")
    if not limits.max_processes or os.getuid() == 0 or prlimit is None:
        return []
    mine = 0
    for name in os.listdir("/proc"):
        with contextlib.suppress(OSError):
            if name.isdigit() and os.stat(f"/proc/{name}").st_uid == os.getuid():
                mine += len(os.listdir(f"/proc/{name}/task"))
    n = mine + limits.max_processes
    return [prlimit, f"--nproc={n}:{n}", "--"]


_RUNS: dict[str, RunLimits] = {}


@atexit.register
def _cleanup() -> None:
    """Our runs' cgroups go with us (their processes were killed by the runner's atexit)."""
    for run in list(_RUNS.values()):
        run.remove()
    for run in _RUNS.values():
        for d in run.dirs.values():
            _rmdir(d.parent)


def start(key: str, limits: Limits) -> list[str]:
    """The argv prefix that runs a command inside ``limits``; ``key`` names the run for
    :func:`finish` (the runner uses the run's probe file). Raises OSError when a cgroup could
    be made but not set up (the run must not start unlimited)."""
    dirs = _cgroups(limits) if limits.max_processes or limits.max_memory else {}
    if dirs:
        procs = [str(d / "cgroup.procs") for d in dict.fromkeys(dirs.values())]
        prefix = ["/bin/sh", "-c", _JOIN, "portside-limits", *procs, "--"]
    else:
        prefix = _nproc_prefix(limits)
    old = _RUNS.pop(key, None)
    if old is not None:
        old.remove()
    _RUNS[key] = RunLimits(limits, dirs, prefix)
    return prefix


_ENOSPC = re.compile(r"No space left on device|ENOSPC|Errno 28\b")


def finish(key: str, output: str = "", clean: bool = False) -> str:
    """Which limit the run ``key`` hit ("" if none or unknown), from its cgroup's counters,
    or from ``output`` (the last lines it printed) saying a write found no space, where its
    tmpfs mounts were sized. ``clean``: the run exited 0, and only the counters (facts the
    run cannot print) say it hit one. Its cgroups are removed."""
    run = _RUNS.pop(key, None)
    if run is None:
        return ""
    try:
        hit = run.hit()
    finally:
        run.remove()
    if not hit and not clean and run.limits.tmp_size and _ENOSPC.search(output):
        hit = (f"no space left: a private tmpfs (/tmp, /dev/shm, /run, /var/tmp, the home) "
               f"holds [sandbox] tmp_size_fraction = {run.limits.tmp_size / GiB:.2f} GiB, or "
               "the disk of the workspace is full")
    return hit
