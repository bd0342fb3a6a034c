"""Where did it diverge: compare a reference trace with a candidate trace (trace mode records).

Pure: reads the JSON records ``core/probe/trace.py`` wrote (FORMAT.md, "Trace mode") and walks
the reference's events in call order; the first one whose candidate counterpart differs beyond
a tolerance that fits the dtypes is the divergence. Bitwise equality cannot work across devices
(every op differs in the last bits), so tensors are compared by four statistics: norm, mean,
abs-max and a fixed-pattern projection.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Event type in the trace -> divergence kind
KIND = {
    "param": "weights",
    "input": "input",
    "module": "module",
    "loss": "loss",
    "grad": "gradient",
    "clipped": "clip",
    "update": "update",
}
EVENT_TYPES = frozenset(KIND)
# Relative tolerance by dtype: a few hundred ulps of fp32 after K steps (CPU vs XLA:CPU differs in
# the last bits of every op), a couple of bf16/fp16 ulps.
RTOL = {"float64": 1e-9, "float32": 1e-4, "bfloat16": 3e-2, "float16": 5e-3}
RTOL_OTHER = 1e-5  # integers and bools: their statistics are computed in float32
EPS = {"float64": 2.2e-16, "float32": 1.2e-7, "bfloat16": 7.8e-3, "float16": 9.8e-4}
STATS = ("norm", "mean", "absmax", "proj")
# Wrappers that prefix every qualified name (DDP / FSDP, torch.compile): the same model either way
WRAPPER_PREFIXES = ("module.", "_orig_mod.", "_fsdp_wrapped_module.")


class TraceError(ValueError):
    """A trace file that cannot be read: names the file and line."""


@dataclass
class Trace:
    header: dict[str, Any]
    weights: list[dict[str, Any]]
    events: list[dict[str, Any]]
    end: dict[str, Any] | None
    source: str = ""

    @property
    def steps(self) -> int:
        if self.end is not None:
            return int(self.end.get("steps") or 0)
        return len({e["step"] for e in self.events})


def read_trace(path: str | Path) -> Trace:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise TraceError(f"{path}: cannot read the trace ({e.strerror or e})") from None
    return parse_trace(text.splitlines(), str(path))


def parse_trace(lines: Iterable[str], source: str = "<trace>") -> Trace:
    header: dict[str, Any] | None = None
    weights: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    end = None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise TraceError(f"{source}:{n}: not JSON ({e.msg})") from None
        if not isinstance(rec, dict) or "type" not in rec:
            raise TraceError(f"{source}:{n}: a trace record is an object with a 'type'")
        t = rec["type"]
        if t == "trace":
            header = rec
        elif t == "weights":
            weights.append(rec)
        elif t == "trace_end":
            end = rec
        elif t in EVENT_TYPES:
            for key in ("step", "name"):
                if key not in rec:
                    raise TraceError(f"{source}:{n}: {t} record without {key!r}")
            name = unwrap(str(rec["name"]))
            if name != rec["name"]:
                rec = dict(rec, name=name, traced_name=rec["name"])
            events.append(rec)
    if header is None:
        raise TraceError(f"{source}: no 'trace' header record (not a trace file?)")
    return Trace(header, weights, events, end, source)


def unwrap(name: str) -> str:
    """The name without wrapper prefixes: DDP's ``module.encoder.0`` is ``encoder.0``."""
    while True:
        for p in WRAPPER_PREFIXES:
            if name.startswith(p):
                name = name[len(p):]
                break
        else:
            return name


def _key(e: dict[str, Any]) -> tuple[Any, ...]:
    return (e["step"], e["type"], e["name"], e.get("call", 0), e.get("out", ""))


def _f(v: Any) -> float:
    if isinstance(v, str):
        return float(v)  # "nan", "inf", "-inf"
    return float(v) if v is not None else math.nan


def _rtol(dtype: str, override: float | None) -> float:
    if override is not None:
        return override
    return RTOL.get(dtype, RTOL_OTHER)


def stats_of(e: dict[str, Any]) -> dict[str, Any]:
    keys = ("shape", "dtype", *STATS, "base", "cls")
    return {k: e[k] for k in keys if k in e}


def differs(ref: dict[str, Any], cand: dict[str, Any], rtol: float | None = None) -> str | None:
    """Why two events' tensors differ, or None when they agree within the dtype's tolerance."""
    if ref.get("cls") is not None and cand.get("cls") not in (None, ref.get("cls")):
        return f"module class {ref['cls']} vs {cand['cls']}"
    if list(ref.get("shape") or []) != list(cand.get("shape") or []):
        return f"shape {ref.get('shape')} vs {cand.get('shape')}"
    if ref.get("dtype") != cand.get("dtype"):
        return f"dtype {ref.get('dtype')} vs {cand.get('dtype')}"
    dtype = str(ref.get("dtype"))
    tol = _rtol(dtype, rtol)
    n = max(1, math.prod(int(s) for s in (ref.get("shape") or [1])))
    a = {k: _f(ref.get(k)) for k in STATS}
    b = {k: _f(cand.get(k)) for k in STATS}
    scale = max(abs(a["norm"]), abs(b["norm"])) if _finite(a["norm"], b["norm"]) else 0.0
    # An update is a difference of two close numbers: only as exact as the weights' magnitude.
    floor = 4 * EPS.get(dtype, 0.0) * max(_f(ref.get("base") or 0.0), _f(cand.get("base") or 0.0))
    floor = floor if math.isfinite(floor) else 0.0
    for k in STATS:
        x, y = a[k], b[k]
        if math.isnan(x) or math.isnan(y):
            if math.isnan(x) != math.isnan(y):
                return f"{k} {_fmt(x)} vs {_fmt(y)}"
            continue
        if math.isinf(x) or math.isinf(y):
            if x != y:
                return f"{k} {_fmt(x)} vs {_fmt(y)}"
            continue
        if k in ("norm", "absmax"):
            allowed = tol * max(abs(x), abs(y)) + floor + 1e-30
        else:  # mean and projection are near 0 for centred data: relative to the RMS
            allowed = (tol * scale + floor) / math.sqrt(n) + 1e-30
        if abs(x - y) > allowed:
            rel = abs(x - y) / max(abs(x), abs(y), 1e-30)
            return f"{k} {_fmt(x)} vs {_fmt(y)} (differs by {rel:.2g} relative; tolerance {tol:g})"
    return None


def _finite(*xs: float) -> bool:
    return all(math.isfinite(x) for x in xs)


def _fmt(x: float) -> str:
    return f"{x:.6g}"


def _names(events: Iterable[dict[str, Any]], types: tuple[str, ...]) -> list[str]:
    out: dict[str, None] = {}
    for e in events:
        if e["type"] in types:
            out.setdefault(e["name"] or "(model output)", None)
    return list(out)


def compare(ref: Trace, cand: Trace, rtol: float | None = None) -> dict[str, Any]:
    """The first divergence of cand from ref, in ref's call order, and what exists on one side.

    Steps present on both sides are compared (a side that stopped early limits it; the step a
    side crashed in is compared as far as it got).
    """
    # Steps both sides recorded (a side that crashed mid-step still has that step's first part).
    common = {e["step"] for e in ref.events} & {e["step"] for e in cand.events}
    rev = [e for e in ref.events if e["step"] in common]
    cev = [e for e in cand.events if e["step"] in common]
    steps = len(common)
    cmap = {_key(e): e for e in cev}
    rkeys = {_key(e) for e in rev}
    divergence: dict[str, Any] | None = None
    compared = 0
    for e in rev:
        c = cmap.get(_key(e))
        if c is None:
            continue
        compared += 1
        why = differs(e, c, rtol)
        if why is None:
            continue
        if e["type"] == "param" and why.startswith("shape"):
            continue  # a changed layer: listed as an architecture change, not as weights
        divergence = {
            "kind": KIND[e["type"]],
            "name": (e["name"] or "(model output)") if e["type"] != "loss" else None,
            "step": e["step"],
            "call": e.get("call", 0),
            "out": e.get("out", ""),
            "reason": why,
            "tolerance": _rtol(str(e.get("dtype")), rtol),
            "reference": stats_of(e),
            "candidate": stats_of(c),
        }
        before = [x for x in cev[: cev.index(c)] if _key(x) not in rkeys and x["type"] == "module"]
        if before:
            divergence["after_candidate_only"] = _names(before, ("module",))
        break
    if divergence is None:
        divergence = {"kind": "none", "name": None, "step": None}
    only_ref = [e for e in rev if _key(e) not in cmap]
    only_cand = [e for e in cev if _key(e) not in rkeys]
    return {
        "divergence": divergence,
        "steps_compared": steps,
        "events_compared": compared,
        "only_reference": _one_side(only_ref),
        "only_candidate": _one_side(only_cand),
        "architecture": _shape_changes(rev, cmap),
        "weights": _weights(ref, cand),
    }


def _one_side(events: list[dict[str, Any]]) -> dict[str, list[str]]:
    return {"modules": _names(events, ("module",)), "params": _names(events, ("param",))}


def _shape_changes(rev: list[dict[str, Any]], cmap: dict[tuple[Any, ...], Any]) -> list[str]:
    out = []
    for e in rev:
        c = cmap.get(_key(e))
        if e["type"] == "param" and c is not None and e.get("shape") != c.get("shape"):
            out.append(f"{e['name']}: {e.get('shape')} -> {c.get('shape')}")
    return out


def _weights(ref: Trace, cand: Trace) -> dict[str, Any]:
    r = ref.weights[0] if ref.weights else {}
    c = cand.weights[0] if cand.weights else {}
    out: dict[str, Any] = {
        "reference_checksum": r.get("checksum"),
        "candidate_checksum": c.get("checksum"),
        "same_start": r.get("checksum") is not None and r.get("checksum") == c.get("checksum"),
    }
    if "aligned" in c or "error" in c:
        out["alignment"] = {k: c[k] for k in ("aligned", "matched_by", "loaded", "differed",
                                              "shape_mismatch", "missing", "unexpected", "error")
                            if k in c}
        out["aligned_checksum"] = c.get("checksum_aligned")
    return out


def summary_line(result: dict[str, Any]) -> str:
    """One line for a person: where, and why."""
    d = result["divergence"]
    if d["kind"] == "none":
        return f"no divergence in {result['steps_compared']} step(s)"
    where = d["kind"] if d["name"] is None else f"{d['kind']} {d['name']}"
    return f"first divergence: {where} at step {d['step']}: {d['reason']}"
