"""The Ray engine: each phase of a task is a Ray task asking for the phase's resources
(references a ``CPU`` or ``GPU``, candidates the target's, e.g. ``TPU: 4``), so Ray places it.

The Ray task starts the same worker process as the local engine on its node and streams the
worker's event lines back in batches (a streaming generator): the submitting process appends
them through its one writer. Ray does not retry a phase itself (``max_retries=0``): a phase
whose node or worker died is run again by the study, from the session's log, so the cut-off
run is finished ``engine-killed`` and never counted as an attempt.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .engines import WorkerLost

BATCH_S = 0.05  # how long lines gather before a batch goes back to the head


def _phase_task(job: dict[str, Any]) -> Iterator[list[bytes]]:
    """Runs on the node Ray chose: the worker, its lines back in batches."""
    import ray

    from .local_engine import WorkerProcess

    node = ray.get_runtime_context().get_node_id()
    log = Path(tempfile.gettempdir()) / "portside-study" / f"{job['session_id']}-{job['phase']}.log"
    worker = WorkerProcess(job, log, env={"PORTSIDE_STUDY_NODE": node})
    batch: list[bytes] = []
    last = time.monotonic()
    for line in worker.lines():  # WorkerLost propagates: the head sees the task fail
        batch.append(line)
        if time.monotonic() - last >= BATCH_S:
            yield batch
            batch, last = [], time.monotonic()
    if batch:
        yield batch


class RayStream:
    def __init__(self, ref_gen: Any, where: str) -> None:
        self._gen = ref_gen
        self.where = where

    def lines(self) -> Iterator[bytes]:
        import ray

        try:
            for ref in self._gen:
                yield from ray.get(ref)
        except ray.exceptions.RayError as exc:  # a dead node, worker or the task's own error
            raise WorkerLost(f"ray: {type(exc).__name__}: {str(exc).strip()[-300:]}") from None

    def send(self, line: bytes) -> None:
        del line
        raise WorkerLost("the ray engine does not carry a reviewer's decision to its worker")

    def cancel(self) -> None:
        import ray

        with contextlib.suppress(Exception):  # already finished or gone: nothing to cancel
            ray.cancel(self._gen, force=True)


class RayEngine:
    name = "ray"
    # The Ray task's stream goes one way (worker to head): `policy = "ask"` tasks need the
    # local engine, whose worker's stdin carries the decisions.
    reviewable = False

    def __init__(self, address: str | None, parallel: int | None = None) -> None:
        try:
            import ray
        except ImportError:
            raise ValueError("the ray engine needs Ray: pip install 'portside[ray]'") from None
        if not ray.is_initialized():
            # The workers import portside as this process does (PYTHONPATH travels along).
            env = {k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ}
            ray.init(address=address or os.environ.get("RAY_ADDRESS") or "auto",
                     runtime_env={"env_vars": env} if env else None,
                     log_to_driver=False)
        self._task = ray.remote(_phase_task)
        # Ray queues what the cluster cannot place yet; the bound only caps head-side threads.
        self.slots = parallel or 64

    def start(self, job: dict[str, Any], resources: dict[str, float]) -> RayStream:
        res = dict(resources)
        options: dict[str, Any] = {"max_retries": 0, "num_cpus": res.pop("CPU", 0.0),
                                   "num_gpus": res.pop("GPU", 0.0)}
        if res:
            options["resources"] = res
        gen = self._task.options(**options).remote(job)
        return RayStream(gen, f"ray {', '.join(f'{k}={v:g}' for k, v in resources.items())}")

    def close(self) -> None:
        pass
