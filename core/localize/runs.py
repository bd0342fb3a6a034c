"""Run the reference and the candidate in trace mode under the runner, then compare the traces.

The reference runs first and saves its initial parameters; the candidate loads them by
qualified name before its first forward (trace mode only), so both start from the same weights
even when the port creates the model on a device whose RNG differs. Both use the same seed.
Each run stops itself after the K traced steps.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from portside.core.localize.traces import TraceError, compare, read_trace
from portside.core.log import events as ev
from portside.core.run.runner import Runner, RunResult, RunSpec

TRACE_ENV = ("PORTSIDE_TRACE_OUT", "PORTSIDE_TRACE_STEPS", "PORTSIDE_TRACE_SEED",
             "PORTSIDE_TRACE_INIT", "PORTSIDE_TRACE_SAVE_INIT", "PORTSIDE_TRACE_EXIT")
DEFAULT_STEPS = 2
DEFAULT_TIMEOUT_S = 900.0


def trace_env(base: Mapping[str, str], out: Path, steps: int, seed: int, *,
              save_init: Path | None = None, init: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in base.items() if k not in TRACE_ENV}
    env.update(PORTSIDE_TRACE_OUT=str(out), PORTSIDE_TRACE_STEPS=str(steps),
               PORTSIDE_TRACE_SEED=str(seed), PORTSIDE_TRACE_EXIT="1")
    if save_init is not None:
        env["PORTSIDE_TRACE_SAVE_INIT"] = str(save_init)
    if init is not None:
        env["PORTSIDE_TRACE_INIT"] = str(init)
    return env


def _run_json(role: str, result: RunResult, trace: Path) -> dict[str, Any]:
    error = f"{result.error_type}: {result.error_message}".strip(": ")
    return {"role": role, "run": result.run_id, "exit_code": result.exit_code,
            "reason": result.reason, "wall_s": round(result.wall_s, 3), "error": error,
            "trace": str(trace) if trace.exists() else None}


async def trace_run(
    runner: Runner,
    role: str,
    command: str,
    cwd: Path,
    trace: Path,
    *,
    steps: int = DEFAULT_STEPS,
    seed: int = 0,
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
    env: Mapping[str, str] | None = None,
    save_init: Path | None = None,
    init: Path | None = None,
) -> RunResult:
    """One run in trace mode under the runner (probe injected as for any run)."""
    for stale in (trace, *([save_init] if save_init is not None else [])):
        stale.unlink(missing_ok=True)
    run_env = trace_env(dict(os.environ if env is None else env), trace, steps, seed,
                        save_init=save_init, init=init)
    spec = RunSpec(run_id=f"localize-{role[:3]}-{ev.new_id()[:6]}",
                   role="reference" if role == "reference" else "candidate", attempt=0,
                   command=command, cwd=cwd, target="cpu", seed_offset=0,
                   timeout_s=timeout_s, env=run_env)
    return await runner.run(spec)


def compare_files(reference: Path, candidate: Path, steps: int,
                  rtol: float | None = None) -> dict[str, Any]:
    """compare() of two trace files, with the devices and notes on a side that stopped early;
    an unreadable trace gives ``error``."""
    try:
        ref, cand = read_trace(reference), read_trace(candidate)
    except TraceError as e:
        return {"divergence": None, "error": str(e)}
    out = compare(ref, cand, rtol)
    out["devices"] = {"reference": ref.header.get("device"), "candidate": cand.header.get("device")}
    for role, tr in (("reference", ref), ("candidate", cand)):
        if tr.end is None or tr.end.get("reason") != "steps":
            out.setdefault("notes", []).append(
                f"the {role} traced {tr.steps} of {steps} step(s) before it ended")
    return out


async def localize(
    reference: str,
    candidate: str,
    cwd: Path,
    workdir: Path,
    *,
    steps: int = DEFAULT_STEPS,
    seed: int = 0,
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
    env: Mapping[str, str] | None = None,
    candidate_cwd: Path | None = None,
    session_id: str = "localize",
    emit: Callable[[ev.Event], object] | None = None,
    rtol: float | None = None,
) -> dict[str, Any]:
    """The comparison (core.localize.compare's object) plus the two runs; on failure an
    ``error`` and ``divergence`` None."""
    t0 = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    runner = Runner(session_id, emit or (lambda e: None), workdir / "probe")
    init = workdir / "reference.init.pt"
    out: dict[str, Any] = {"steps": steps, "seed": seed, "runs": []}
    traces = {}
    for role, command, where in (("reference", reference, cwd),
                                 ("candidate", candidate, candidate_cwd or cwd)):
        trace = workdir / f"{role}.trace.jsonl"
        result = await trace_run(
            runner, role, command, where, trace, steps=steps, seed=seed, timeout_s=timeout_s,
            env=env, save_init=init if role == "reference" else None,
            init=init if role == "candidate" and init.exists() else None)
        out["runs"].append(_run_json(role, result, trace))
        if not trace.exists():
            why = result.error_message or f"{result.reason}, exit {result.exit_code}"
            out.update(divergence=None, wall_s=round(time.monotonic() - t0, 3),
                       error=f"the {role} run recorded no trace (it never called a model with "
                             f"parameters, or failed first): {why}"[:500])
            return out
        traces[role] = trace
    out.update(compare_files(traces["reference"], traces["candidate"], steps, rtol))
    for run in out["runs"]:
        if run["exit_code"] != 0:  # its trace holds what it did before it failed
            out.setdefault("notes", []).append(
                f"the {run['role']} run ended {run['reason']} (exit {run['exit_code']})"
                + (f": {run['error']}" if run["error"] else ""))
    out["wall_s"] = round(time.monotonic() - t0, 3)
    return out


# Alarms that say the candidate computes something else: localizing answers "where".
TRIGGERS = ("numeric-drift", "clipping-changed", "goal-regression")


async def localize_for(engine: Any, alarm_id: str, run_id: str, cwd: Path, work: Path
                       ) -> tuple[dict[str, Any], str]:
    """Trace both commands for one alarm and publish ``alarm.localized`` (verify --localize,
    and the live screen's key for the selected alarm)."""
    from portside.core.localize.traces import summary_line

    config = engine.config
    result = await localize(config.reference_command, config.candidate, Path(config.project),
                            work, env=config.candidate_env, candidate_cwd=cwd,
                            session_id=engine.session_id,
                            timeout_s=config.timeout_s or DEFAULT_TIMEOUT_S)
    summary = summary_line(result) if not result.get("error") else ""
    engine.bus.publish(ev.AlarmLocalized(
        session_id=engine.session_id, alarm_id=alarm_id, run_id=run_id,
        divergence=result.get("divergence"), summary=summary, error=result.get("error", ""),
        wall_s=float(result.get("wall_s") or 0.0)))
    return result, summary


async def localize_alarm(engine: Any, report: Any, cwd: Path) -> None:
    """After a candidate run (``verify --localize``): for its first drift, clipping or goal
    alarm, trace both commands, publish ``alarm.localized`` and set ``report.localize``."""
    alarms = sorted((a for a in engine.ledger.alarms.values()
                     if a.run_id == report.run_id and a.check in TRIGGERS), key=lambda a: a.seq)
    if not alarms:
        report.localize = {"divergence": None,
                           "skipped": "no numeric-drift, clipping-changed or goal-regression alarm"}
        return
    alarm = alarms[0]
    work = engine.workdir / "localize" / report.run_id
    result, summary = await localize_for(engine, alarm.alarm_id, report.run_id, cwd, work)
    report.localize = {"alarm": alarm.check, "alarm_id": alarm.alarm_id,
                       "divergence": result.get("divergence"), "summary": summary,
                       "error": result.get("error", ""), "wall_s": result.get("wall_s"),
                       "weights": result.get("weights"),
                       "only_reference": result.get("only_reference"),
                       "only_candidate": result.get("only_candidate"),
                       "workdir": str(work)}
