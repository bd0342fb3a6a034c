"""What a run's processes really loaded and opened, read by portside from outside them.

The probe's facts come from inside the training process, where the code under review runs
too; a candidate can write any facts it likes. The kernel's view cannot be written from
there: ``/proc/<pid>/maps`` lists the shared objects a process mapped and ``/proc/<pid>/fd``
the files it holds open. A run that claims a TPU has libtpu mapped or ``/dev/accel*`` /
``/dev/vfio/*`` open; one that claims CUDA has libcuda mapped or ``/dev/nvidia*`` open.
The runner samples the run's processes while it runs (local runs only: a remote host's /proc
is not ours to read) and records what it saw as portside's own ``observed`` records, which
``core/checks/integrity.py`` holds against the facts.

Names alone are not evidence (issue 38): a device counts only when the open file is a
character device whose major number is the accelerator driver's (``/proc/devices``), never a
regular file named ``/dev/accel0``; a library counts only when the mapped file (its device and
inode, from the maps line) is the very file portside sees at that path and lies outside every
path the run may write (a sandboxed run's private /tmp is another file system, its workspace
and probe folder are named by the runner). Every process of the run is read, whatever its
executable is called.
"""

from __future__ import annotations

import functools
import os
import re
import stat
import time
from collections.abc import Iterable, Sequence

__all__ = ["KINDS", "Sighting", "sample"]

#: What a mapped library or an open device node says about the hardware, by pattern.
_LIBS = (
    ("tpu", re.compile(r"/libtpu[^/]*\.so")),
    ("cuda", re.compile(r"/libcuda\.so")),
    ("nccl", re.compile(r"/libnccl[^/]*\.so")),
    ("torch_xla", re.compile(r"/_XLAC[^/]*\.so")),
    ("torch", re.compile(r"/libtorch_cpu[^/]*\.so")),
)
_DEVICES = (
    ("tpu", re.compile(r"^/dev/(accel\d*|vfio/.*)$")),
    ("cuda", re.compile(r"^/dev/nvidia.*$")),
)
KINDS = tuple(dict.fromkeys(k for k, _ in (*_LIBS, *_DEVICES)))


#: Character-device drivers (names in /proc/devices) whose nodes are each kind's hardware.
_DRIVERS = {"tpu": re.compile(r"^(accel|vfio)$"), "cuda": re.compile(r"^nvidia")}


class Sighting:
    """The union of what every sample of one run saw: kind → a few example paths."""

    def __init__(self) -> None:
        self.seen: dict[str, list[str]] = {}
        self.samples = 0
        self.pids: set[int] = set()
        # The last sample that saw a process of the run alive (portside's clock): a claim
        # received after it is not held to what was seen.
        self.alive_at: float | None = None

    def add(self, kind: str, path: str) -> bool:
        paths = self.seen.setdefault(kind, [])
        if path in paths or len(paths) >= 4:
            return False
        paths.append(path)
        return True

    def record(self, t: float, final: bool = False) -> dict[str, object]:
        return {"type": "observed", "source": "portside", "t": t, "samples": self.samples,
                "processes": len(self.pids), "seen": {k: list(v) for k, v in self.seen.items()},
                "alive_at": self.alive_at, "final": final}


def _maps(pid: int) -> Iterable[tuple[str, int, int]]:
    """(path, device, inode) of each shared object the process mapped."""
    try:
        with open(f"/proc/{pid}/maps", "rb") as fh:
            data = fh.read()
    except OSError:
        return ()
    out = set()
    for line in data.split(b"\n"):
        if b".so" not in line:
            continue  # only lines naming a shared object can match
        parts = line.split(None, 5)
        if len(parts) < 6:
            continue
        try:
            major, minor = (int(x, 16) for x in parts[3].split(b":"))
            out.add((parts[5].decode("utf-8", "replace"), os.makedev(major, minor),
                     int(parts[4])))
        except ValueError:
            continue
    return out


def _fds(pid: int) -> Iterable[tuple[str, int, int]]:
    """(path, mode, rdev) of each file under /dev the process holds open."""
    out: list[tuple[str, int, int]] = []
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return out
    for n in names:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{n}")
            if target.startswith("/dev/"):
                st = os.stat(f"/proc/{pid}/fd/{n}")  # the open file itself, not the name
                out.append((target, st.st_mode, st.st_rdev))
        except OSError:
            continue
    return out


@functools.lru_cache(maxsize=1)
def _majors() -> dict[str, frozenset[int]]:
    """Each kind's driver majors, from the kernel's own list of character devices."""
    got: dict[str, set[int]] = {k: set() for k in _DRIVERS}
    try:
        with open("/proc/devices") as fh:
            text = fh.read()
    except OSError:
        return {k: frozenset() for k in _DRIVERS}
    chars = text.split("Block devices:")[0]
    for line in chars.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit():
            for kind, rx in _DRIVERS.items():
                if rx.search(parts[1]):
                    got[kind].add(int(parts[0]))
    return {k: frozenset(v) for k, v in got.items()}


def _host_file(path: str, dev: int, ino: int, writable: Sequence[str]) -> bool:
    """The mapped file is the one at `path` here, a regular file outside the run's reach."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    if (st.st_dev, st.st_ino) != (dev, ino) or not stat.S_ISREG(st.st_mode):
        return False
    real = os.path.realpath(path)
    return not any(real == w or real.startswith(w.rstrip("/") + "/") for w in writable)


def sample(sighting: Sighting, pids: Iterable[int], writable: Sequence[str] = ()) -> bool:
    """Read each process's maps and open files into ``sighting``; True when it saw anything
    new (a kind, or a new example of one). ``writable``: real paths the run can write (a
    library there is the run's own)."""
    new = False
    pids = list(pids)
    sighting.samples += bool(pids)
    majors = _majors()
    for pid in pids:
        sighting.pids.add(pid)
        for path, dev, ino in _maps(pid):
            for kind, rx in _LIBS:
                if rx.search(path) and _host_file(path, dev, ino, writable):
                    new |= sighting.add(kind, path)
        for path, mode, rdev in _fds(pid):
            for kind, rx in _DEVICES:
                if (rx.match(path) and stat.S_ISCHR(mode)
                        and os.major(rdev) in majors.get(kind, ())):
                    new |= sighting.add(kind, path)
    if pids:
        sighting.alive_at = time.time()
    return new
