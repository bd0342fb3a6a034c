"""The seam between a study and what runs its tasks: a launcher starts one phase of one task
somewhere and hands back the phase's event lines, in order, as they come.

Two launchers ship: ``local`` (core/study/local_launcher.py: worker processes on this machine, at
most ``--parallel`` at once) and ``ray`` (core/study/ray_launcher.py: each phase a Ray task with
the phase's resource request, placed by Ray). Another launcher (SkyPilot, Kubernetes Jobs) is a
class with ``start``: it must run ``python -m portside.core.study.worker`` with the job on
stdin where the resources are, and carry the lines the worker writes back to this process.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol


class WorkerLost(RuntimeError):
    """The phase did not end in good order (its worker, process or node died): it is run again
    from the session's log."""


class PhaseStream(Protocol):
    where: str  # a label, before the worker says exactly where it runs

    def lines(self) -> Iterator[bytes]:
        """Each event line, in order; ends after the phase's done line; WorkerLost else."""
        ...

    def cancel(self) -> None: ...

    def send(self, line: bytes) -> None:
        """A line for the worker (a reviewer's decision: core/study/review_relay.py)."""
        ...


class Launcher(Protocol):
    name: str
    slots: int  # phases at once (local: --parallel; ray: as many as the cluster takes)
    reviewable: bool  # whether send() reaches the worker: tasks may wait for a reviewer
    # Whether send() reaches every phase's worker, not only an asking task's: the head then
    # answers every phase's reference lookups (core/study/reference_lookup.py).
    lines_to_every_phase: bool

    def start(self, job: dict[str, Any], resources: dict[str, float]) -> PhaseStream: ...

    def close(self) -> None: ...
