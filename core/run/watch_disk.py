"""A live run's disk: stopped before it fills the file system under its directory."""

from __future__ import annotations

import os
import time
from pathlib import Path

DISK_RESERVE_BYTES = 1 << 30  # a run is stopped when its disk's free space falls below this
DISK_CHECK_S = 1.0


class DiskWatch:
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
