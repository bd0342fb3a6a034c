"""Outcome of an attempt, as the study counts them, and a run's summary. Pure functions."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from portside.core.checks import Alarm, RunEnd, RunRecords, device_facts, steady_step_s
from portside.core.checks.memory import peak_memory

if TYPE_CHECKING:
    from portside.core.run.runner import RunResult


def run_end(result: RunResult, stall_s: float | None) -> RunEnd:
    """How the run ended, as the checks read it (the end-of-run checks, the final pass)."""
    return RunEnd(
        exit_code=result.exit_code,
        signal=result.signal,
        timed_out=result.reason == "timeout",
        stalled=result.reason == "stalled",
        error_type=result.error_type or None,
        error_message=result.error_message or None,
        wall_s=result.wall_s,
        stall_s=stall_s,
        tail=tuple(result.tail),
    )


def classify_outcome(exit_code: int | None, timed_out: bool, stalled: bool,
                     alarms: Iterable[Alarm], stopped: bool = False) -> str:
    """failed-timeout (wall limit or stall) before failed-error (non-zero or unknown exit: a
    killed run also exits non-zero) before failed-silent (exit 0 with an error-or-worse alarm).
    A run portside stopped at an alarm that decided it ([stop]) is failed-silent: the run raised
    no error of its own; the alarm, error-level by the rule, is why it failed."""
    if stopped:
        return "failed-silent"
    if timed_out or stalled:
        return "failed-timeout"
    if exit_code != 0:
        return "failed-error"
    if any(a.is_error for a in alarms):
        return "failed-silent"
    return "passed"


def _clean(v: float | None) -> float | str | None:
    if v is None:
        return None
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return float(v)


def summarize_run(records: RunRecords, exit_code: int | None, wall_s: float | None,
                  warmup_steps: int) -> dict[str, Any]:
    """exit_code, wall_s, steps, compile_s (summed per-step compile seconds) and
    compile_s_outside_steps (the exit record's total beyond that: e.g. evaluation after
    training), compiles, steady_step_s (median step time after warm-up, compile steps left out),
    metrics (last value per metric name, and the last loss seen as `loss`), device facts.
    JSON-ready (NaN as "nan")."""
    in_steps = float(np.nansum(records.compile_s)) if records.n else 0.0
    ex = records.exit or {}
    outside = 0.0
    if isinstance(ex.get("compile_s"), int | float) and math.isfinite(ex["compile_s"]):
        outside = max(float(ex["compile_s"]) - in_steps, 0.0)
    fin_comp = records.compiles[np.isfinite(records.compiles)]
    compiles = int(fin_comp[-1]) if fin_comp.size else None
    if isinstance(ex.get("compiles"), int | float):
        compiles = int(ex["compiles"])
    metrics: dict[str, Any] = {name: _clean(vals[-1]) for name, vals in records.metrics.items() if vals}
    seen = np.flatnonzero(~np.isnan(records.loss) | records.loss_nonfinite)
    if seen.size:
        metrics.setdefault("loss", _clean(float(records.loss[seen[-1]])))
    return {
        "exit_code": exit_code,
        "wall_s": wall_s,
        "steps": records.n,
        "compile_s": in_steps,
        "compile_s_outside_steps": outside,
        "compiles": compiles,
        "steady_step_s": steady_step_s(records, warmup_steps),
        "metrics": metrics,
        "device": device_facts(records.facts),
        "memory": peak_memory(ex),
    }
