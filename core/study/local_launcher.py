"""The embedded launcher: each phase a worker process on this machine (core/study/worker.py),
at most ``parallel`` at once. The Ray launcher runs the same worker, on a node Ray chose."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from .launchers import WorkerLost
from .worker import DONE

LOG_TAIL_BYTES = 2000


def default_parallel() -> int:
    # Each phase runs one training process at a time; leave a core for the head.
    return max(1, (os.cpu_count() or 2) - 1)


class WorkerProcess:
    """A worker started here: the job on its stdin (kept open: its parent's life line), its
    events on a pipe of their own, its stdout and stderr in ``log``."""

    def __init__(self, job: dict[str, Any], log: Path, env: dict[str, str] | None = None):
        read_fd, write_fd = os.pipe()
        log.parent.mkdir(parents=True, exist_ok=True)
        self.log = log
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "portside.core.study.worker", "--events-fd",
                 str(write_fd)],
                stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT,
                pass_fds=(write_fd,), env={**os.environ, **(env or {})},
                start_new_session=True)  # a ^C at the terminal reaches the head, which decides
        os.close(write_fd)
        self.events: IO[bytes] = os.fdopen(read_fd, "rb")
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(job).encode() + b"\n")
        self.proc.stdin.flush()
        self.where = f"pid {self.proc.pid}"

    def lines(self) -> Iterator[bytes]:
        done = False
        try:
            for line in self.events:
                if line == DONE:
                    done = True
                    continue
                yield line
        finally:
            self.events.close()
            if self.proc.stdin is not None:
                with contextlib.suppress(OSError):
                    self.proc.stdin.close()
        rc = self.proc.wait()
        if not done or rc != 0:
            raise WorkerLost(f"worker {self.where} ended with status {rc} before its phase "
                             f"did: {self.tail()}")

    def tail(self) -> str:
        try:
            with open(self.log, "rb") as f:
                f.seek(max(0, f.seek(0, 2) - LOG_TAIL_BYTES))
                return f.read().decode("utf-8", "replace").strip().splitlines()[-1:][0]
        except (OSError, IndexError):
            return "(no output)"

    def send(self, line: bytes) -> None:
        """After the job, the worker's stdin carries a reviewer's decisions, one per line."""
        if self.proc.stdin is None or self.proc.stdin.closed:
            raise WorkerLost(f"worker {self.where}: its stdin is closed")
        try:
            self.proc.stdin.write(line)
            self.proc.stdin.flush()
        except (OSError, ValueError) as exc:
            raise WorkerLost(f"worker {self.where}: {exc}") from None

    def cancel(self) -> None:
        # Its stdin closing is the worker's cue: its runs are stopped, then it exits.
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()


class LocalLauncher:
    name = "local"
    reviewable = True
    lines_to_every_phase = True  # each worker's stdin: the head's answers to its lookups

    def __init__(self, parallel: int | None = None) -> None:
        self.slots = parallel or default_parallel()

    def start(self, job: dict[str, Any], resources: dict[str, float]) -> WorkerProcess:
        del resources  # one machine: --parallel is the bound
        log = Path(job["work_root"]) / "study-logs" / f"{job['session_id']}-{job['phase']}.log"
        return WorkerProcess(job, log)

    def close(self) -> None:
        pass
