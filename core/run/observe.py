"""What a run's processes really loaded and opened, read by portside from outside them.

The probe's facts come from inside the training process, where the code under review runs
too; a candidate can write any facts it likes. The kernel's view cannot be written from
there: ``/proc/<pid>/maps`` lists the shared objects a process mapped and ``/proc/<pid>/fd``
the files it holds open. A run that claims a TPU has libtpu mapped or ``/dev/accel*`` /
``/dev/vfio/*`` open; one that claims CUDA has libcuda mapped or ``/dev/nvidia*`` open.
The runner samples the run's processes while it runs (local runs only: a remote host's /proc
is not ours to read) and records what it saw as portside's own ``observed`` records, which
``core/checks/evidence.py`` holds against the facts.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Iterable

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


class Sighting:
    """The union of what every sample of one run saw: kind → a few example paths."""

    def __init__(self) -> None:
        self.seen: dict[str, list[str]] = {}
        self.samples = 0
        self.pids: set[int] = set()
        # The last sample that saw a Python process alive: a claim written after it is not
        # held to what was seen.
        self.python_at: float | None = None

    def add(self, kind: str, path: str) -> bool:
        paths = self.seen.setdefault(kind, [])
        if path in paths or len(paths) >= 4:
            return False
        paths.append(path)
        return True

    def record(self, t: float, final: bool = False) -> dict[str, object]:
        return {"type": "observed", "source": "portside", "t": t, "samples": self.samples,
                "processes": len(self.pids), "seen": {k: list(v) for k, v in self.seen.items()},
                "python_at": self.python_at, "final": final}


def _maps(pid: int) -> Iterable[str]:
    try:
        with open(f"/proc/{pid}/maps", "rb") as fh:
            data = fh.read()
    except OSError:
        return ()
    # The path is the last field; only lines naming a shared object can match.
    return {line.rsplit(b" ", 1)[-1].decode("utf-8", "replace")
            for line in data.split(b"\n") if b".so" in line}


def _fds(pid: int) -> Iterable[str]:
    out: list[str] = []
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return out
    for n in names:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{n}")
        except OSError:
            continue
        if target.startswith("/dev/"):
            out.append(target)
    return out


def sample(sighting: Sighting, pids: Iterable[int]) -> bool:
    """Read each process's maps and open files into ``sighting``; True when it saw anything
    new (a kind, or a new example of one)."""
    new = python = False
    pids = list(pids)
    sighting.samples += bool(pids)
    for pid in pids:
        sighting.pids.add(pid)
        with contextlib.suppress(OSError):
            python |= os.path.basename(os.readlink(f"/proc/{pid}/exe")).startswith("python")
        for path in _maps(pid):
            for kind, rx in _LIBS:
                if rx.search(path):
                    new |= sighting.add(kind, path)
        for path in _fds(pid):
            for kind, rx in _DEVICES:
                if rx.match(path):
                    new |= sighting.add(kind, path)
    if python:
        sighting.python_at = time.time()
    return new
