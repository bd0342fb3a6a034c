"""The probe's torch_xla bookkeeping: compile and execute counters per step, the probe's own
grad norm as a small graph of its own after the step's sync (its compilations left out of
the counts), the batched device-to-host copy of a flush's values, the exit record's totals.

Loaded by path by ``_probe.py`` (stdlib at import; torch_xla only through the modules it is
given), never imports portside. Format: FORMAT.md.
"""

from __future__ import annotations

import math
import os
import time
import weakref
from collections.abc import Callable
from typing import Any

MAX_COMPILE_CAUSES = 50
NORM_MAX_STRIDE = 50
# The probe's own norm runs every NORM_EVERY-th step: no sparser than the drift check's
# default smoothing (10 steps), so the smoothed series has no gaps. Stretched (up to
# NORM_MAX_STRIDE) only where tracing and launching it costs more than NORM_BUDGET of the
# step time at that stride.
NORM_EVERY = 10
NORM_BUDGET = 0.01
NORM_SAMPLES, NORM_MIN_SAMPLES = 5, 3  # the stride follows the median of the last 5


def norm_stride(shares: list[float], floor: int, now: int) -> int:
    """The stride at which the probe's own XLA norm costs NORM_BUDGET of the step time,
    from the median of its last costs (shares of their steps); `now` until there are enough."""
    if len(shares) < NORM_MIN_SAMPLES:
        return now
    want = math.ceil(sorted(shares)[len(shares) // 2] / NORM_BUDGET)
    return min(NORM_MAX_STRIDE, max(floor, want))


def load(modules: dict[str, Any]) -> dict[str, Any] | None:
    """torch_xla's modules the probe uses, once the program imported torch_xla, else None."""
    if "torch_xla" not in modules:
        return None
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as met
    import torch_xla.runtime as xr

    return {"torch_xla": torch_xla, "xm": xm, "met": met, "xr": xr}


def raw_totals(met: Any) -> tuple[int, float, float]:
    """CompileTime count and seconds, ExecuteTime seconds, as torch_xla's metrics hold them."""
    count, compile_s, execute_s = 0, 0.0, 0.0
    c = met.metric_data("CompileTime")
    if c is not None:
        count, compile_s = int(c[0]), c[1] / 1e9
    e = met.metric_data("ExecuteTime")
    if e is not None:
        execute_s = e[1] / 1e9
    return count, compile_s, execute_s


def fetch(torch: Any, xla: dict[str, Any], recs: list[dict[str, Any]]) -> None:
    """The records' XLA values whose step ran: one batched device-to-host copy, no compile,
    no sync; they are CPU tensors afterwards."""
    slots: list[tuple[Any, Any]] = []  # (container, key)
    tensors: list[Any] = []
    for rec in recs:
        for cont, keys in (
            (rec, ("loss", "grad_norm", "max_norm")),
            (rec["lr"], range(len(rec["lr"]))),
        ):
            for k in keys:
                v = cont[k]
                if isinstance(v, torch.Tensor) and v.device.type == "xla":
                    slots.append((cont, k))
                    tensors.append(v)
    if not tensors:
        return
    cpu = xla["torch_xla"]._XLAC._xla_get_cpu_tensors(tensors)
    for (cont, k), t in zip(slots, cpu):  # noqa: B905 (same length by construction)
        cont[k] = t


class XlaBook:
    """Per process: the counters at the last step and the probe's own norm's state."""

    def __init__(self) -> None:
        self.last = (0, 0.0, 0.0)  # CompileTime count, compile s, ExecuteTime s at last step
        self.stride = 0  # > 0 once the after-sync norm is in use
        self.grads: list[tuple[Any, int]] | None = None  # taken at this step's pre-hook
        self.jobs: list[tuple[dict[str, Any], list[tuple[Any, int]]]] = []
        # The last few norms' cost as a share of their step (CPU s tracing and launching it over
        # the step's wall time): the stride follows their median, so one slow sample (a busy
        # machine, a GC pause) does not stretch it.
        self.shares: list[float] = []
        self.missed = 0  # due norms whose gradients were gone or changed at the sync
        self.norm_s = 0.0  # CPU s in tracing and launching those that compiled nothing
        self.own = (0, 0.0)  # CompileTime count and s of the probe's own graphs

    def totals(self, met: Any) -> tuple[int, float, float]:
        """CompileTime count and seconds less the probe's own compilations, ExecuteTime s."""
        count, compile_s, execute_s = raw_totals(met)
        return count - self.own[0], compile_s - self.own[1], execute_s

    def metrics(self, met: Any, rec: dict[str, Any]) -> None:
        """The step's compiles so far, and its compile and execute seconds."""
        count, compile_s, execute_s = self.totals(met)
        last = self.last
        rec["compiles"] = count
        rec["compile_s"] = compile_s - last[1]
        rec["execute_s"] = execute_s - last[2]
        if self.own[0]:
            rec["probe_compiles"] = self.own[0]
        self.last = (count, compile_s, execute_s)

    def later(self, grads: list[Any]) -> bool:
        """Remember this step's gradients (weakly, with their version counters): keeping them
        alive would make them outputs of the step graph, i.e. a different graph. True the
        first time (the stride starts at NORM_EVERY)."""
        first = not self.stride
        if first:
            self.stride = NORM_EVERY
        self.grads = [(weakref.ref(g), g._version) for g in grads]
        return first

    def take(self) -> list[tuple[Any, int]] | None:
        grads, self.grads = self.grads, None
        return grads

    def attach(self, rec: dict[str, Any], grads: list[tuple[Any, int]]) -> None:
        if rec.get("_wait") is not True:
            return  # no step closure: the step's values are not on the XLA device
        self.jobs.append((rec, grads))
        del self.jobs[:-4]  # a program that never syncs: don't hold them forever

    def launch(self, torch: Any, xla: dict[str, Any], rec: dict[str, Any], alone: Callable[[], bool],
               stride_now: int, warn: Callable[[str], None]) -> int:
        """In the step closure, i.e. right after the step's sync: the gradients are device data
        now, so their norm is a small graph of its own reading them, launched asynchronously
        (no host wait: the value is copied out later with the loss). Its compilation (once per
        set of gradient shapes) is the probe's: left out of the compile counts. Returns the
        stride for the next norms (`stride_now` unless this one says otherwise); `alone`: one
        process and no SPMD (an SPMD norm is a collective every process must launch alike)."""
        job = next((j for j in self.jobs if j[0] is rec), None)
        if job is None:
            return stride_now
        self.jobs.remove(job)
        # This thread's CPU time: the probe's own work, blind to other processes' load.
        t0 = time.thread_time()
        grads = []
        for ref, version in job[1]:
            g = ref()
            if g is None or g._version != version:
                # Freed (zero_grad before torch_xla.sync) or changed in place since the step.
                self.missed += 1
                warn("torch_xla: gradients freed or changed before torch_xla.sync(): "
                     "no grad norm of the probe's own on those steps")
                return stride_now
            grads.append(g)
        with torch.no_grad():
            grads = [g.detach() for g in grads]
            foreach = getattr(torch, "_foreach_norm", None)  # one call: ~15% less tracing
            norms = foreach(grads) if foreach is not None else [
                torch.linalg.vector_norm(g) for g in grads]
            norm = torch.linalg.vector_norm(torch.stack(list(norms)))
        met = xla["met"]
        c0, s0, _ = raw_totals(met)
        xla["torch_xla"]._XLAC._xla_sync_multi([norm], [str(norm.device)], False, True)
        c1, s1, _ = raw_totals(met)
        self.own = (self.own[0] + c1 - c0, self.own[1] + s1 - s0)
        if rec.get("grad_norm_source") is None:
            rec.update(grad_norm=norm, grad_norm_source="probe", max_norm=None)
        cost = time.thread_time() - t0
        if c1 != c0:
            return stride_now
        self.norm_s += cost
        if not alone():
            return stride_now
        # Steady state, one process: stretch the stride if tracing the norm costs too much.
        shares = self.shares
        shares.append(cost / max(rec.get("step_s") or 0.0, 1e-9))
        del shares[:-NORM_SAMPLES]
        return norm_stride(shares, self.stride, stride_now)

    def exit(self, xla: dict[str, Any], rec: dict[str, Any]) -> None:
        """The exit record's totals: compiles and seconds, the probe's own share, the CPU
        fallback ops, and the compile causes PT_XLA_DEBUG_FILE names."""
        met = xla["met"]
        rec["compiles"], rec["compile_s"], rec["execute_s"] = self.totals(met)
        if self.own[0]:
            rec["probe_compiles"], rec["probe_compile_s"] = self.own
        if self.norm_s:
            rec["probe_norm_s"] = self.norm_s
        if self.missed:
            rec["probe_norm_missed"] = self.missed
        ops: dict[str, Any] = {}
        for name in met.executed_fallback_ops() or []:
            try:
                ops[name] = met.counter_value(name)
            except Exception:
                ops[name] = None
        rec["fallback_ops"] = ops
        path = os.environ.get("PT_XLA_DEBUG_FILE")
        if path and os.path.exists(path):
            causes: list[str] = []
            with open(path, errors="replace") as f:
                for line in f:
                    if "Compilation Cause" in line or "too frequent" in line:
                        causes.append(line.strip())
                        if len(causes) >= MAX_COMPILE_CAUSES:
                            break
            rec["compile_causes"] = causes
