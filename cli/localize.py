"""`portside localize`: where the candidate's computation first parts from the reference's."""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import click

from portside.core.localize.runs import localize
from portside.core.localize.traces import summary_line


def localize_cmd_body(reference: str, candidate: str, steps: int, cwd: Path, as_json: bool,
                      timeout_s: float | None, keep: Path | None, rtol: float | None) -> int:
    """0: no divergence, 1: a divergence found, 2: could not trace (the error says why)."""
    workdir = keep or Path(tempfile.mkdtemp(prefix="portside-localize-"))
    if not as_json:
        click.echo(f"portside localize: tracing {steps} step(s) of the reference, then the "
                   f"candidate (trace mode; files in {workdir})", err=True)
    result = asyncio.run(localize(reference, candidate, cwd.resolve(), workdir, steps=steps,
                                  timeout_s=timeout_s, rtol=rtol))
    if as_json:
        sys.stdout.write(json.dumps(result, default=str) + "\n")
    else:
        _print(result)
    if result.get("error"):
        return 2
    return 0 if result["divergence"]["kind"] == "none" else 1


def _print(result: dict[str, Any]) -> None:
    for run in result["runs"]:
        line = f"{run['role']}: {run['reason']} (exit {run['exit_code']}, {run['wall_s']:.1f} s)"
        click.echo(line + (f": {run['error']}" if run["error"] else ""))
    if result.get("error"):
        click.echo(f"error: {result['error']}")
        return
    w = result.get("weights") or {}
    al = w.get("alignment")
    if al and al.get("differed"):
        click.echo(f"initial parameters differed ({len(al['differed'])} tensor(s)); loaded the "
                   f"reference's by {al.get('matched_by')} into the candidate (trace mode only)")
    elif al and al.get("error"):
        click.echo(f"initial parameters could not be aligned: {al['error']}")
    if al and (al.get("missing") or al.get("shape_mismatch")):
        click.echo(f"  not loaded: missing {al.get('missing')}, shape {al.get('shape_mismatch')}")
    click.echo(summary_line(result))
    d = result["divergence"]
    if d["kind"] != "none":
        for side in ("reference", "candidate"):
            click.echo(f"  {side:9}: {_stats(d[side])}")
        if d.get("after_candidate_only"):
            click.echo(f"  after candidate-only modules: {', '.join(d['after_candidate_only'])}")
    for side in ("only_reference", "only_candidate"):
        names = result.get(side) or {}
        if names.get("modules") or names.get("params"):
            click.echo(f"{side.replace('_', ' ')}: modules {names.get('modules')}, "
                       f"params {names.get('params')}")
    if result.get("architecture"):
        click.echo("changed shapes: " + "; ".join(result["architecture"]))
    for note in result.get("notes", []):
        click.echo(f"note: {note}")
    click.echo(f"localize took {result['wall_s']:.1f} s")


def _stats(s: dict[str, Any]) -> str:
    parts = [f"{s.get('cls')}" if s.get("cls") else "", f"{s.get('dtype')}{s.get('shape')}"]
    parts += [f"{k}={s[k]:.6g}" if isinstance(s.get(k), float) else f"{k}={s.get(k)}"
              for k in ("norm", "mean", "absmax") if k in s]
    return " ".join(p for p in parts if p)
