"""Shared by the localize tests: trace one reference, then many candidates, with the runner."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from cli_run import clean_env

from portside.core.localize.runs import compare_files, trace_run
from portside.core.run.runner import Runner

SCRIPT = Path(__file__).parent / "scripts" / "train.py"


def command(args: str, python: str = sys.executable) -> str:
    return f"{python} {SCRIPT} {args}"


async def _trace_all(tmp: Path, reference: str, candidates: dict[str, str], steps: int,
                     parallel: int) -> dict[str, dict[str, Any]]:
    runner = Runner("test-localize", lambda e: None, tmp / "probe")
    init, ref = tmp / "ref.init.pt", tmp / "ref.trace.jsonl"
    res = await trace_run(runner, "reference", reference, tmp, ref, steps=steps,
                          env=clean_env(), save_init=init)
    assert res.exit_code == 0, res.tail[-20:]
    sem = asyncio.Semaphore(parallel)

    async def one(name: str, cmd: str) -> tuple[str, dict[str, Any]]:
        trace = tmp / f"{name}.trace.jsonl"
        async with sem:
            r = await trace_run(runner, "candidate", cmd, tmp, trace, steps=steps,
                                env=clean_env(), init=init)
        assert r.exit_code == 0, (name, r.tail[-20:])
        out = compare_files(ref, trace, steps)
        out["run"] = r
        return name, out

    return dict(await asyncio.gather(*(one(n, c) for n, c in candidates.items())))


def trace_all(tmp: Path, reference: str, candidates: dict[str, str], steps: int = 2,
              parallel: int = 2) -> dict[str, dict[str, Any]]:
    return asyncio.run(_trace_all(tmp, reference, candidates, steps, parallel))
