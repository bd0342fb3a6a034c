"""The performance and cost verdict, as one sentence with the numbers it came from.

"candidate 1.9× the reference's steady throughput, 24% cheaper per successful run; 41 s of
compilation first" — folded from the log's run.finished events (the Ledger), so the live
header, `verify --json`, the headless summary and the report print the same figures, and no
other line states a speed or a cost ratio (whole-run wall times mix compilation, imports and
the machine's load into one number that contradicted this one).

Speed is the steady state, apart from preparation (compilation, and whatever ran before the
first step): a run's steady step time is the median of its step times after warm-up, compiled
steps left out (core/checks/slow.py); a side's is the median over its passed runs. Throughput
is steps/s of that steady state (the same work per step on both sides). A busy machine moves
whole runs, not single steps, so the median of one run does not see it; the references (the
same command, seeds apart) do: when their steady step times lie more than
:data:`SPREAD_LIMIT` × apart the speed ratio is said to be not meaningful, with their range.
Cost per successful run is every attempt's device cost (failed ones and their preparation
included) over the runs that passed, priced from the recorded price table (core/log/costs.py);
prices are printed with 3 significant digits, which show the difference they claim.
"""

from __future__ import annotations

import math
from typing import Any

from portside.core.log.ledger import Ledger, RunEntry, steady_step_of


def _devices(run: RunEntry) -> int:
    facts = run.finished.device if run.finished is not None else {}
    n = facts.get("device_count") if isinstance(facts, dict) else None
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 1


# Steady step times of one command more than this far apart (max / min over the references):
# the machine, not the code, decides the speed, and a ratio would state noise.
SPREAD_LIMIT = 1.5


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _side(runs: list[RunEntry]) -> dict[str, Any]:
    """One role's figures: its passed runs' speed, every run's cost."""
    passed = [r for r in runs if r.outcome == "passed" and r.finished is not None]
    steady = [r.finished.steady_step_s for r in passed
              if r.finished is not None and r.finished.steady_step_s]
    prep = [r.finished.compile_s for r in passed if r.finished is not None]
    priced = [r.compute_usd for r in runs if r.compute_usd is not None]
    total = sum(priced) if priced and len(priced) == len(runs) else None
    step = steady_step_of(passed)
    return {
        "runs": len(runs),
        "passed": len(passed),
        "steady_step_s": step,
        "steady_range_s": [min(steady), max(steady)] if steady else None,
        "steps_per_s": 1.0 / step if step else None,
        "compile_s": _mean([float(p) for p in prep]),
        "devices": max((_devices(r) for r in passed), default=None),
        "usd": total,
        "usd_per_successful_run": total / len(passed) if total is not None and passed else None,
        "shared_machine": any(r.threads for r in passed),
    }


def performance(ledger: Ledger) -> dict[str, Any] | None:
    """Reference vs candidate; None until a reference and a candidate both passed."""
    refs = [r for r in ledger.runs.values() if r.role == "reference" and r.finished is not None]
    cands = [r for r in ledger.runs.values() if r.role == "candidate" and r.finished is not None]
    ref, cand = _side(refs), _side(cands)
    if not ref["passed"] or not cand["passed"]:
        return None
    speed = (ref["steady_step_s"] / cand["steady_step_s"]
             if ref["steady_step_s"] and cand["steady_step_s"] else None)
    noisy = _too_wide(ref)
    cost = (cand["usd_per_successful_run"] / ref["usd_per_successful_run"]
            if cand["usd_per_successful_run"] is not None and ref["usd_per_successful_run"]
            else None)
    return {"reference": ref, "candidate": cand,
            "throughput_ratio": None if noisy else speed, "speed_not_meaningful": noisy,
            "cost_ratio": cost, "line": _sentence(ref, cand, speed, cost, noisy)}


def too_far_apart(lo: float, hi: float) -> bool:
    """Whether steady step times of one command ranging lo..hi say the machine, not the code,
    decided them (the performance sentence and the study's table ask the same)."""
    return lo > 0 and hi / lo > SPREAD_LIMIT


def _too_wide(side: dict[str, Any]) -> str:
    """Why this side's steady step time says nothing (its runs too far apart), or ""."""
    lo_hi = side["steady_range_s"]
    if not lo_hi or not too_far_apart(*lo_hi):
        return ""
    return (f"the references' own steady steps range {_ms(lo_hi[0])} to {_ms(lo_hi[1])} "
            f"(more than {SPREAD_LIMIT:g}× apart: the machine was busy)")


def _sentence(ref: dict[str, Any], cand: dict[str, Any], speed: float | None,
              cost: float | None, noisy: str = "") -> str:
    if noisy:
        parts = [f"steady speed not meaningful here: {noisy}"]
    elif speed is None:
        parts = ["steady step time unknown (no step records)"]
    else:
        parts = [f"candidate {speed:.2g}× the reference's steady throughput "
                 f"({_ms(cand['steady_step_s'])} vs {_ms(ref['steady_step_s'])} a step)"]
    failed = cand["runs"] - cand["passed"]
    retries = f", {failed} failed attempt{'s' if failed != 1 else ''} included" if failed else ""
    if cost is None:
        parts.append("cost not priced" if cand["usd"] is None or ref["usd"] is None
                     else "reference cost $0")
    else:
        pct = round((1 - cost) * 100)
        times = f"{cost:.1f}" if cost < 10 else f"{cost:,.0f}"
        word = (f"{times}× the cost" if cost >= 2 else f"{pct}% cheaper" if pct > 0
                else f"{-pct}% dearer" if pct < 0 else "the same cost")
        parts.append(f"{word} per successful run ({usd(cand['usd_per_successful_run'])} vs "
                     f"{usd(ref['usd_per_successful_run'])}{retries})")
    head = ", ".join(parts)
    tail = [f"{cand['compile_s']:.1f} s of preparation first (reference "
            f"{ref['compile_s']:.1f} s)"] if cand["compile_s"] is not None else []
    if cand["devices"] != ref["devices"]:
        tail.append(f"{cand['devices']} device(s) vs {ref['devices']}")
    if speed is not None and (cand["shared_machine"] or ref["shared_machine"]):
        # Runs at once split the cores but still share caches and the memory bus.
        tail.append("step times from runs that shared this machine ([hosts] parallel; "
                    "1 compares them alone)")
    return "; ".join([head, *tail])


def usd(x: float) -> str:
    """A price with 3 significant digits (at least 2 decimals): two of them show the difference
    a "20% dearer" claims ($0.000120 vs $0.000100, not $0.0001 vs $0.0001)."""
    places = 2 if not x else min(12, max(2, 2 - math.floor(math.log10(abs(x)))))
    return f"${x:.{places}f}"


def _ms(s: float | None) -> str:
    return "?" if s is None else f"{s * 1000:.3g} ms"


def larger_inputs(ledger: Ledger) -> list[dict[str, Any]]:
    """Each finished larger-input run ([larger]) beside the candidate attempt it followed:
    steps, outcome, peak memory, preparation and steady step time, and one line saying them."""
    crit = ledger.started.criteria if ledger.started is not None else {}
    section = crit.get("larger") if isinstance(crit, dict) else None
    values = section.get("vars") if isinstance(section, dict) else None
    at = ", ".join(f"{k}={v}" for k, v in values.items()) if isinstance(values, dict) else ""
    cands = {r.attempt: r for r in ledger.candidates()}
    out = []
    for run in ledger.runs.values():
        if run.role != "larger" or run.finished is None:
            continue
        cand = cands.get(run.attempt)
        big, small = _figures(run), _figures(cand) if cand is not None else {}
        out.append({"run": run.run_id, "attempt": run.attempt, "vars": values or {},
                    "candidate_run": cand.run_id if cand is not None else None,
                    "larger": big, "candidate": small,
                    "line": _larger_line(at or "larger inputs", big, small)})
    return out


def _figures(run: RunEntry) -> dict[str, Any]:
    f = run.finished
    assert f is not None
    mem = f.device.get("memory") if isinstance(f.device, dict) else None
    mem = mem if isinstance(mem, dict) else {}
    return {"outcome": f.outcome, "steps": f.steps, "steady_step_s": f.steady_step_s,
            "compile_s": f.compile_s, "peak_bytes": mem.get("peak_bytes"),
            "memory_fraction": mem.get("fraction"), "memory_where": mem.get("where")}


def _larger_line(at: str, big: dict[str, Any], small: dict[str, Any]) -> str:
    parts = [f"at {at}: {big['outcome']} after {big['steps']} step(s)"]
    if big["peak_bytes"]:
        share = f" ({big['memory_fraction']:.0%})" if big["memory_fraction"] else ""
        was = f" vs {small['peak_bytes'] / 2**30:.2f} GiB" if small.get("peak_bytes") else ""
        parts.append(f"peak {big['memory_where'] or ''} memory "
                     f"{big['peak_bytes'] / 2**30:.2f} GiB{share}{was}".replace("  ", " "))
    if big["steady_step_s"]:
        ratio = (f" ({big['steady_step_s'] / small['steady_step_s']:.2g}×)"
                 if small.get("steady_step_s") else "")
        parts.append(f"steady step {_ms(big['steady_step_s'])} vs "
                     f"{_ms(small.get('steady_step_s'))}{ratio}")
    parts.append(f"{big['compile_s']:.1f} s of preparation")
    return "; ".join(parts)
