"""Runs the corpus through the real verification path: the probe injected by the runner,
`Verifier` with three reference runs (seed offsets 0, 1, 2) and each candidate at offset 0,
every alarm from `run_checks`. Cases run concurrently, a few processes at a time."""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from portside.core.log import events as ev
from portside.core.log.bus import EventBus
from portside.core.log.criteria import parse_criteria
from portside.core.session.verify import Verifier
from tests.doubles import MemorySink

from .cases import CASES, Case

REFERENCES = 3


@dataclass
class Row:
    case: str
    candidate: str
    expected: str  # "pass" or the alarm kind naming the planted cause; "!kind": must not appear
    errors: list[str]  # error/critical alarm kinds
    alarms: list[str]  # every alarm, "severity:kind"
    titles: list[str] = field(default_factory=list)
    steps: int = 0
    reference_steps: list[int] = field(default_factory=list)
    # raised on the run while it ran and cleared by the final judgement ("severity:kind"):
    # shown to the reviewer for a while all the same, so a "!kind" row bans them too
    withdrawn: list[str] = field(default_factory=list)

    @property
    def got(self) -> str:
        return "pass" if not self.errors else ",".join(sorted(set(self.errors)))

    @property
    def ok(self) -> bool:
        kinds = {a.split(":", 1)[1] for a in self.alarms + self.withdrawn}
        want = [w for w in self.expected.split() if not w.startswith("!")]
        banned = [w[1:] for w in self.expected.split() if w.startswith("!")]
        if any(b in kinds for b in banned):
            return False
        return not self.errors if want == ["pass"] else all(w in self.errors for w in want)


def _command(case: Case, flags: str, nproc: int = 0, candidate: bool = False) -> str:
    launcher = (candidate and case.candidate_launcher) or case.launcher
    script = (candidate and case.candidate_script) or case.script
    return f"{launcher(sys.executable, nproc)} {script} {flags}".strip()


async def run_case(case: Case, root: Path, slots: asyncio.Semaphore) -> list[Row]:
    crit = parse_criteria(case.criteria, f"corpus:{case.name}")
    sink = MemorySink()
    v = Verifier(EventBus(sink), f"corpus-{case.name}", crit, case.target,
                 root / case.name, timeout_s=600 if case.xla else 300, stall_s=240 if case.xla else 120)
    refs = []
    for _ in range(REFERENCES):
        async with slots:
            refs.append(await v.run_reference(_command(case, case.reference), case.cwd))
    ref_steps = [r.records.n for r in refs]
    rows = []
    for label, flags, expected, *nproc in case.candidates:
        async with slots:
            rep = await v.run_candidate(_command(case, flags, *nproc, candidate=True),
                                         case.cwd)
        rows.append(Row(case.name, label, expected,
                        [a.kind for a in rep.alarms if a.is_error],
                        [f"{a.severity}:{a.kind}" for a in rep.alarms],
                        [f"[{a.severity}] {a.kind}: {a.title}" for a in rep.alarms],
                        rep.records.n, ref_steps, _withdrawn(sink, rep.run_id)))
    if any(r.alarms and r.alarms[0].startswith("error:reference") for r in rows) or any(
            a.kind == "reference-failed" for r in refs for a in r.alarms):
        raise RuntimeError(f"{case.name}: a reference run failed: "
                           f"{[r.result.tail[-5:] for r in refs]}")
    return rows


def _withdrawn(sink: MemorySink, run_id: str) -> list[str]:
    cleared = {e.alarm_id for e in sink.events if isinstance(e, ev.AlarmCleared)}
    return [f"{e.severity}:{e.check}" for e in sink.events
            if isinstance(e, ev.AlarmRaised) and e.run_id == run_id and e.alarm_id in cleared]


async def run_all(names: list[str] | None = None, parallel: int = 2,
                  xla: bool | None = None) -> list[Row]:
    """`xla`: True only the XLA:CPU cases, False none of them, None all."""
    slots = asyncio.Semaphore(parallel)
    cases = [c for c in CASES if (not names or c.name in names) and xla in (None, c.xla)]
    with tempfile.TemporaryDirectory(prefix="portside-corpus-") as tmp:
        results = await asyncio.gather(*(run_case(c, Path(tmp), slots) for c in cases))
    return [row for rows in results for row in rows]


def run(names: list[str] | None = None, parallel: int = 2,
        xla: bool | None = None) -> tuple[list[Row], float]:
    t0 = time.perf_counter()
    rows = asyncio.run(run_all(names, parallel, xla))
    return rows, time.perf_counter() - t0


def table(rows: list[Row]) -> str:
    head = f"{'case':<14} {'candidate':<28} {'expected':<34} {'got':<36} ok  alarms"
    lines = [head, "-" * len(head)]
    for r in rows:
        others = [a for a in r.alarms if not a.startswith(("error:", "critical:"))]
        lines.append(f"{r.case:<14} {r.candidate:<28} {r.expected:<34} {r.got:<36} "
                     f"{'yes' if r.ok else 'NO ':<3} {', '.join(others) or '-'}"
                + (f"; withdrawn {', '.join(r.withdrawn)}" if r.withdrawn else ""))
    return "\n".join(lines)
