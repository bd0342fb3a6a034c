"""Checks on how the candidate ran: hardware, compilation, CPU fallback, how it ended."""

from __future__ import annotations

import math
from typing import Any

import msgspec
import numpy as np

from portside.core.checks.wanted_hardware import hardware_findings
from portside.core.log.criteria import Criteria

from .alarms import Alarm
from .crash_cause import classify
from .evidence import CpuFallback, Hardware, Recompilation, RunEnded
from .records.comparison import Comparison
from .records.records import RunRecords

TARGETS = ("cpu", "cuda", "xla", "xla:cpu", "tpu", "tpu:v5e", "tpu:v5p", "tpu:v6e")
FACT_KEYS = ("backend", "device_kind", "device_name", "device_count", "real_devices",
             "pjrt_device", "world_size", "param_devices", "param_dtypes", "versions",
             "compute_devices", "compute_devices_how", "compute_scope", "compute_shardings")


def validate_target(target: str) -> str:
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r} (known: {', '.join(TARGETS)})")
    return target


def device_facts(facts: dict[str, Any] | None) -> dict[str, Any]:
    return {k: facts.get(k) for k in FACT_KEYS if k in facts} if facts else {}


# --- wrong-hardware / unverified-hardware ----------------------------------------------------


def check_hardware(c: Comparison, criteria: Criteria) -> list[Alarm]:
    """Target against the probe's real-device facts.

    cpu: device_kind CPU (an XLA backend on CPU is a warning: it is XLA:CPU, not plain CPU);
    cuda: CUDA; xla: an XLA backend (torch_xla/torch_tpu) on any real device; xla:cpu: an XLA
    backend on CPU; tpu: an XLA backend on TPU; tpu:vXX: and the device name names that
    generation (a name without one → unverified-hardware). Device count is judged only when
    `hardware.devices` > 0, against the devices the step computed on (`compute_devices`, over
    the ranks): an SPMD port whose inputs are never sharded computes on one device however
    many the host has. Logs without that fact: the facts' device_count, or the ranks'
    parameter devices.
    """
    cand, target = c.cand, c.target
    validate_target(target)
    facts = cand.facts
    if not facts:
        # Facts come with the first optimizer step: without steps there is nothing to verify
        # (no-metrics / crashed say why).
        if cand.n > 0:
            return [Alarm("unverified-hardware", "warning",
                          f"no device facts recorded: cannot verify target {target}",
                          Hardware(target=target, steps=cand.n), key="unverified-hardware")]
        return []
    ev = Hardware(target=target, **device_facts(facts))  # FACT_KEYS are Hardware's fields
    alarms: list[Alarm] = []

    def wrong(why: str, severity: str = "error") -> None:
        alarms.append(Alarm("wrong-hardware", severity, f"target {target}, but {why}", ev,
                            key="wrong-hardware"))

    for f in hardware_findings(target, facts):  # the rule the views share
        if f.kind == "wrong-hardware":
            wrong(f.why, f.severity)
        else:
            alarms.append(Alarm(f.kind, f.severity, f.why, ev, key=f.kind))

    devices = criteria.hardware.devices
    computed = compute_devices(facts, cand.rank_facts)
    if computed is not None:
        n, how = computed
        ev = msgspec.structs.replace(ev, compute_devices=n, compute_devices_how=how)
        if len(cand.rank_facts) > 1:
            ev = msgspec.structs.replace(ev, rank_compute_devices={
                str(k): f.get("compute_devices") for k, f in sorted(cand.rank_facts.items())})
        if devices and n != devices and not any(a.kind == "wrong-hardware" and a.is_error
                                                for a in alarms):
            host = facts.get("device_count")
            wrong(f"the step computed on {n} device(s), {devices} expected ({how}"
                  + (f"; {host} on the host)" if host is not None else ")"))
        return alarms
    # Logs from before `compute_devices`: the host's count, or the ranks' parameter devices.
    count = facts.get("device_count")
    if count is None and isinstance(facts.get("real_devices"), list):
        count = len(facts["real_devices"])
    if len(cand.rank_facts) > 1:
        # One process per device (torchrun, mp.spawn): the devices the ranks' parameters are
        # on, counted across ranks; each rank's own device_count is the whole host's.
        per_rank = {str(k): f.get("param_devices") for k, f in sorted(cand.rank_facts.items())}
        ev = msgspec.structs.replace(ev, rank_devices=per_rank)
        count = len({(k, d) for k, ds in per_rank.items() for d in (ds or [])}) or count
    if devices and count is not None and int(count) != devices and not any(
            a.kind == "wrong-hardware" and a.is_error for a in alarms):
        wrong(f"{count} device(s) seen, {devices} expected")
    return alarms


def compute_devices(facts: dict[str, Any],
                    rank_facts: dict[int, dict[str, Any]]) -> tuple[int, str] | None:
    """The devices the run's step computed on, from every rank's `compute_devices` fact, and
    how that was decided; None for logs without it. SPMD: one mesh spans the processes and
    each reports the mesh's figure, so it is taken once. One process per device (torchrun,
    xmp): the ranks' figures add up, except ranks on the same GPU (the same device id),
    which count once."""
    figs = [f for _, f in sorted(rank_facts.items())] if len(rank_facts) > 1 else [facts]
    if not all(isinstance(f.get("compute_devices"), int) for f in figs):
        return None
    if any(f.get("compute_scope") == "mesh" for f in figs):
        return max(f["compute_devices"] for f in figs), str(figs[0].get("compute_devices_how"))
    ids: set[str] = set()
    n = 0
    for f in figs:
        if f.get("compute_device_ids"):
            ids.update(map(str, f["compute_device_ids"]))
        else:
            n += f["compute_devices"]
    n += len(ids)
    if len(figs) == 1:
        return n, str(figs[0].get("compute_devices_how"))
    hows = sorted({str(f.get("compute_devices_how")) for f in figs})
    shared = " (ranks sharing a device counted once)" if ids and n < sum(
        f["compute_devices"] for f in figs) else ""
    return n, f"{len(figs)} ranks: {'; '.join(hows)}{shared}"


# --- recompilation ---------------------------------------------------------------------------


def check_recompilation(comparison: Comparison, criteria: Criteria) -> list[Alarm]:
    """Compilations during training steps after warm-up, beyond `max_recompiles`.

    The probe gives cumulative counts per step, so a compile between step records i-1 and i is
    charged to step i. Counted: increments at steps >= warmup_steps. Not counted, reported as
    info: compilations after the last training step (the exit record's count above the last
    step's), e.g. an evaluation pass after training; and a *single* burst of compilations at
    one step after warm-up followed by at least `settle` steps without any (a graph compiled
    once between training steps: the first evaluation pass between epochs). A second burst is
    the same graph compiled again, or shapes that keep changing: all bursts are then counted.
    While a burst is not yet followed by `settle` clean steps, nothing is decided. A compile
    where the lr leaves or reaches exactly 0 or 1 is explained, not counted: torch_xla folds
    those two scalars into the graph as constants (seen on the MNIST example's Adadelta lr 1.0
    under StepLR), so the first other value compiles a new graph once.
    """
    cand = comparison.cand
    comp = cand.compiles
    fin = np.isfinite(comp)
    if not fin.any():
        return []  # backend does not compile (or does not report it)
    steps = cand.steps[fin]
    c = comp[fin]
    cs = cand.compile_s[fin]
    inc = np.diff(c, prepend=c[0])
    inc[0] = 0.0  # the first record's count is the warm-up graph(s)
    counted = (steps >= criteria.compile.warmup_steps) & (inc > 0)
    alarms: list[Alarm] = []
    causes = list((cand.exit or {}).get("compile_causes") or [])[:20]
    scalar = counted & _lr_left_special_scalar(cand.lr[fin])
    if scalar.any():
        counted &= ~scalar
        alarms.append(Alarm(
            "recompilation", "info",
            f"{int(inc[scalar].sum())} compilation(s) where the learning rate left or reached "
            "0 or 1 (torch_xla folds those scalars into the graph, so the next value compiles "
            "once): not counted",
            Recompilation(steps=steps[scalar][:50].tolist(), compiles=inc[scalar][:50].tolist(),
                          lr_around=_lr_around(cand.lr[fin], scalar)),
            key="recompilation:special-scalar"))
    at = np.flatnonzero(counted)
    settle = max(criteria.compile.warmup_steps, 3)
    if at.size == 1:
        after = int(steps.size - 1 - at[0])  # clean step records after the burst
        if after < settle:
            return alarms + _after_training(cand, c, steps, causes)  # not decided yet
        alarms.append(Alarm(
            "recompilation", "info",
            f"{int(inc[at[0]])} compilation(s) once at step {int(steps[at[0]])} after warm-up "
            f"(e.g. an evaluation graph between epochs), none in the {after} steps after: "
            "not counted",
            Recompilation(steps=[int(steps[at[0]])], compiles=[float(inc[at[0]])],
                          compile_s=[float(np.nan_to_num(cs[at[0]]))], clean_steps_after=after,
                          causes=causes),
            key="recompilation:once"))
        return alarms + _after_training(cand, c, steps, causes)
    total = int(inc[counted].sum())
    if total > criteria.compile.max_recompiles:
        alarms.append(Alarm(
            "recompilation", "error",
            f"{total} compilation(s) in {at.size} training step(s) after warm-up "
            f"(allowed {criteria.compile.max_recompiles}); first at step {int(steps[at[0]])}",
            Recompilation(recompiles=total, steps=steps[at[:50]].tolist(),
                          compiles=inc[at[:50]].tolist(),
                          compile_s=np.nan_to_num(cs[at[:50]]).tolist(),
                          compile_s_total=float(np.nansum(cs[at])),
                          warmup_steps=criteria.compile.warmup_steps,
                          warmup_compiles=int(c[0] + inc[~counted].sum()),
                          max_recompiles=criteria.compile.max_recompiles, causes=causes),
            key="recompilation"))
    return alarms + _after_training(cand, c, steps, causes)


_SPECIAL = (0.0, 1.0)


def _lr_left_special_scalar(lr: np.ndarray) -> np.ndarray:
    """Steps whose lr moved from or to exactly 0 or 1, allowing one step of slack either way
    (whether the recorded lr is the one the step used or the scheduler's next one)."""
    prev = np.roll(lr, 1)
    prev[:1] = lr[:1]
    moved = (lr != prev) & np.isfinite(lr) & np.isfinite(prev)
    moved &= np.isin(lr, _SPECIAL) | np.isin(prev, _SPECIAL)
    near = moved.copy()
    near[:-1] |= moved[1:]
    near[1:] |= moved[:-1]
    return near


def _lr_around(lr: np.ndarray, at: np.ndarray) -> list[list[float]]:
    """The lr at the step before, at and after each such compile: the reviewer sees the move."""
    return [[float(x) for x in lr[max(i - 1, 0):i + 2]] for i in np.flatnonzero(at)[:50]]


def _after_training(cand: RunRecords, c: np.ndarray, steps: np.ndarray,
                    causes: list[Any]) -> list[Alarm]:
    alarms: list[Alarm] = []
    ex = cand.exit or {}
    # (a non-finite count in the exit record is no count: int() of it would raise)
    if isinstance(ex.get("compiles"), int | float) and math.isfinite(ex["compiles"]) \
            and ex["compiles"] > c[-1]:
        extra = int(ex["compiles"] - c[-1])
        alarms.append(Alarm(
            "recompilation", "info",
            f"{extra} compilation(s) after the last training step (e.g. evaluation), not counted",
            Recompilation(after_training=extra, last_step=int(steps[-1]),
                          exit_compiles=ex["compiles"], causes=causes),
            key="recompilation:after-training"))
    return alarms


# --- cpu-fallback ----------------------------------------------------------------------------


def check_fallback(c: Comparison, criteria: Criteria) -> list[Alarm]:
    ops = (c.cand.exit or {}).get("fallback_ops") or {}
    if not isinstance(ops, dict):
        return []
    allowed = set(criteria.compile.allowed_fallback_ops)
    bad = {k: v for k, v in ops.items() if k not in allowed and (v or 0) > 0}
    if not bad:
        return []
    return [Alarm("cpu-fallback", "warning",
                  f"{len(bad)} op(s) fell back to CPU: {', '.join(sorted(bad)[:4])}",
                  CpuFallback(ops=bad, allowed=sorted(allowed), all_fallback_ops=ops),
                  key="cpu-fallback")]


# --- how the run ended -----------------------------------------------------------------------


def check_end(c: Comparison, criteria: Criteria) -> list[Alarm]:
    """How the candidate ended; `no-metrics` only at its end, against every reference (those
    without steps too)."""
    refs, cand, final = c.references, c.cand, c.final
    end = cand.end
    if end is None:
        return []
    last = int(cand.steps[-1]) if cand.n else None
    base = RunEnded(exit_code=end.exit_code, signal=end.signal, wall_s=end.wall_s,
                    steps=cand.n, last_step=last)
    if end.stalled:
        return [Alarm("stalled", "error",
                      f"no output or step for {end.stall_s or '?'} s; stopped after "
                      f"{cand.n} step(s)", msgspec.structs.replace(base, stall_s=end.stall_s),
                      key="stalled")]
    if end.timed_out:
        return [Alarm("timed-out", "error", f"wall-clock limit reached after {cand.n} step(s)",
                      base, key="timed-out")]
    if end.exit_code not in (0, None) or end.error_type:
        what = end.error_type or (f"signal {end.signal}" if end.signal else f"exit {end.exit_code}")
        msg = (end.error_message or "").strip()
        cause, line = classify(end.error_type, msg, end.tail)
        return [Alarm("crashed", "error", f"{what}: {msg[:200]}" if msg else f"crashed ({what})",
                      msgspec.structs.replace(base, error_type=end.error_type,
                                              error_message=msg[:4000], cause=cause,
                                              cause_line=line),
                      key="crashed")]
    if not final or end.exit_code != 0:
        return []
    if cand.n == 0:
        return [Alarm("no-metrics", "error", "exited 0 without a single training step",
                      base, key="no-metrics")]
    g = criteria.goal.metric
    if g and cand.last_metric(g) is None and any(r.last_metric(g) is not None for r in refs):
        return [Alarm("no-metrics", "error", f"goal metric {g!r} never reported",
                      msgspec.structs.replace(base, metric=g), key=f"no-metrics:{g}")]
    return []
