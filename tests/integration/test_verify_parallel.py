"""References at once (issue 30): `[hosts] parallel = 2` runs two references side by side.

Real runs through the real Runner and Verifier: a torch-free trainer (the full-size bench's,
which writes sealed probe records as the probe does) wrapped in a shell command that stamps
its own start and end times into a file: that file, not the event log, says whether the runs
overlapped.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from doubles import MemorySink

from portside.core.log import events as ev
from portside.core.log.bus import EventBus
from portside.core.log.criteria import parse_criteria
from portside.core.log.render import event_text
from portside.core.session.verify import Verifier

REPO = Path(__file__).resolve().parents[2]
TRAINER = REPO / "tests" / "bench" / "fullsize_trainer.py"
HOLD_S = 2.0  # each run lasts at least this long, so that runs at once surely overlap


def _command(marks: Path) -> str:
    # One file a stamp, named by the time and the stamping process: two runs appending to one
    # file at once ran their numbers together once ('…5972721796200878.597274'), and two
    # starting at once read the same clock once (CI: EEXIST on one name).
    stamp = (f"{sys.executable} -S -c 'import os, sys, time; "
             f"open(sys.argv[1] + \"/\" + repr(time.time()) + \"-\" + str(os.getpid()), "
             f"\"x\").close()' {marks}")
    return (f"{stamp} && {sys.executable} -S {TRAINER} 200 1 0 1000000 1 && "
            f"sleep {HOLD_S} && {stamp}")


def _verify(tmp: Path, parallel: int) -> tuple[Verifier, MemorySink, list[float]]:
    marks = tmp / f"marks{parallel}"
    marks.mkdir()
    sink = MemorySink()
    crit = parse_criteria(f"[hosts]\nparallel = {parallel}\n", "c.toml")
    verifier = Verifier(EventBus(sink), "par-test", crit, "cpu", tmp / f"probe{parallel}",
                        stall_s=60.0, timeout_s=120)
    reports = asyncio.run(verifier.run_references(2, _command(marks), tmp))
    assert [r.outcome for r in reports] == ["passed", "passed"], [r.alarms for r in reports]
    assert [r.attempt for r in reports] == [1, 2]
    assert [r.records.n for r in reports] == [200, 200]  # each fold got its own run's records
    stamps = sorted(float(p.name.split("-")[0]) for p in marks.iterdir())
    assert len(stamps) == 4  # two starts, two ends, by the runs' own clocks
    return verifier, sink, stamps


def test_two_references_at_once(tmp_path: Path) -> None:
    verifier, sink, stamps = _verify(tmp_path, 2)
    # At once: the second starts while the first holds, so the two earliest stamps are starts.
    assert stamps[1] - stamps[0] < HOLD_S
    starts = [e for e in sink.events if isinstance(e, ev.RunStarted)]
    assert len(starts) == 2 and len({e.run_id for e in starts}) == 2
    assert sorted(e.seed_offset for e in starts) == [0, 1]  # each its own reference number
    assert len([e for e in sink.events if isinstance(e, ev.RunFinished)]) == 2
    assert not verifier.active_runs and verifier.runner.keep_records  # all handed back


def test_one_at_a_time_by_default(tmp_path: Path) -> None:
    _, _, stamps = _verify(tmp_path, 1)
    # One after another: the first run's end (>= HOLD_S after its start) comes before the
    # second's start.
    assert stamps[1] - stamps[0] >= HOLD_S


def _threads_seen(tmp: Path, criteria: str, env: dict[str, str]) -> list[tuple[str, int]]:
    """Each reference's OMP_NUM_THREADS as the run itself printed it, and its RunStarted's
    `threads`, in attempt order."""
    sink = MemorySink()
    verifier = Verifier(EventBus(sink), "threads", parse_criteria(criteria, "c.toml"), "cpu",
                        tmp / "probe", stall_s=60.0, timeout_s=120)
    show = (f"{sys.executable} -S -c 'import os; "
            f"print(\"OMP=\" + os.environ.get(\"OMP_NUM_THREADS\", \"unset\"))'")
    command = f"{show} && {sys.executable} -S {TRAINER} 50 1 0 1000000 1"
    reports = asyncio.run(verifier.run_references(2, command, tmp, env=env))
    assert [r.outcome for r in reports] == ["passed", "passed"]
    said = {}
    for e in sink.events:
        if isinstance(e, ev.RunOutput):
            for line in e.lines:
                if line.startswith("OMP="):
                    said[e.run_id] = line[4:]
    starts = sorted((e for e in sink.events if isinstance(e, ev.RunStarted)),
                    key=lambda e: e.attempt)
    for e in starts:  # the log's line for it says so
        assert ("the machine shared" in event_text(e)) == bool(e.threads), event_text(e)
    return [(said[e.run_id], e.threads) for e in starts]


def test_runs_sharing_the_machine_split_its_cores_between_their_threads(tmp_path: Path) -> None:
    # torch's OpenMP pool takes a thread a core and spins while it waits: two such runs on two
    # cores ran 3.3x slower each (bench_verify_parallel: parallel read 1.5-1.75x the wall time
    # of one after another). Shared, each gets its share; the run's own print is the truth.
    import os

    cores = len(os.sched_getaffinity(0))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    share = max(1, cores // min(2, cores))
    if cores >= 2:
        got = _threads_seen(tmp_path / "a", "[hosts]\nparallel = 2\n", env)
        assert got == [(str(share), share)] * 2
    # One at a time: the run's own default, nothing set.
    assert _threads_seen(tmp_path / "b", "[hosts]\nparallel = 1\n", env) == [("unset", 0)] * 2
    # Set by the user: theirs, untouched.
    mine = {**env, "OMP_NUM_THREADS": "3"}
    assert _threads_seen(tmp_path / "c", "[hosts]\nparallel = 2\n", mine) == [("3", 0)] * 2
