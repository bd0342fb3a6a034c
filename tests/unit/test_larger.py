"""[larger]: the criteria section (its template and variables, the errors naming file:line),
its trip through the log (a resume rebuilds it), its checks on hand-made records, and the fold
that the report and `verify --json` print."""

from __future__ import annotations

import dataclasses as dc
import shlex

import pytest

from portside.core.checks import RunEnd, RunRecords
from portside.core.checks.larger import check_larger
from portside.core.log import events as ev
from portside.core.log.criteria import Criteria, CriteriaError, parse_criteria
from portside.core.log.ledger import fold
from portside.core.log.performance import larger_inputs

SECTION = """\
[compile]
warmup_steps = 2
[larger]
command = "python train.py --batch {batch} --seq {seq} --out ${HOME}/x"
batch = 64
seq = "a b"
steps = 4
max_step_time_ratio = 3
"""


def test_template_takes_its_variables_shell_quoted() -> None:
    c = parse_criteria(SECTION, "c.toml")
    assert c.larger.vars == (("batch", 64), ("seq", "a b"))
    assert c.larger.steps == 4 and c.larger.max_step_time_ratio == 3.0
    cmd = c.larger.render()
    # a shell's own ${HOME} stays the shell's; a value with a space stays one argument
    assert cmd == "python train.py --batch 64 --seq 'a b' --out ${HOME}/x"
    assert shlex.split(cmd)[5] == "a b"


def test_section_survives_the_log() -> None:
    """session.started carries criteria.to_dict(); a resume rebuilds them from it."""
    c = parse_criteria(SECTION, "c.toml")
    back = Criteria.from_dict(ev.from_builtins(ev.to_builtins(ev.SessionStarted(
        session_id="s", project=".", target="cpu", criteria=c.to_dict()))).criteria)
    assert back.larger == c.larger


@pytest.mark.parametrize(("text", "message"), [
    ('[larger]\ncommand = "x --batch {batch}"\n',
     "c.toml:2: larger.command: {batch} has no value: set `batch = ...` in [larger]"),
    ("[larger]\nbatch = 64\n", "c.toml:2: larger.batch: a variable without larger.command"),
    ('[larger]\ncommand = "x"\nsteps = 0\n', "c.toml:3: larger.steps: must be >= 1, got 0"),
    ('[larger]\ncommand = "x"\nbatch = [1, 2]\n',
     "c.toml:3: larger.batch: a variable of the command must be a string or a number"),
    ('[larger]\ncommand = 3\n', "c.toml:2: larger.command: must be a string, got 3"),
])
def test_bad_section_names_file_line_and_key(text: str, message: str) -> None:
    with pytest.raises(CriteriaError) as err:
        parse_criteria(text, "c.toml")
    assert str(err.value).startswith(message)


def _steps(n: int, step_s: float, compiles: list[int] | None = None) -> list[dict]:
    return [{"type": "step", "step": i, "loss": 1.0, "lr": [0.1], "step_s": step_s,
             "compiles": compiles[i] if compiles else None, "compile_s": None}
            for i in range(n)]


def test_checks_on_the_larger_run() -> None:
    c = parse_criteria(SECTION, "c.toml")
    cand = RunRecords.from_records(_steps(12, 0.010), RunEnd(exit_code=0))
    # 4 steps at 4x the step time (over the 3x allowed), a compile at each step after warm-up
    big = RunRecords.from_records(_steps(4, 0.040, compiles=[1, 1, 2, 3]), RunEnd(exit_code=0))
    alarms = {a.kind: a for a in check_larger(cand, big, c)}
    assert set(alarms) == {"recompilation", "slow"}
    assert alarms["recompilation"].severity == "error"
    assert alarms["recompilation"].title.startswith("at batch=64, seq=a b: 2 compilation(s)")
    assert alarms["slow"].evidence.ratio == pytest.approx(4.0)
    assert alarms["slow"].evidence.larger == {"batch": 64, "seq": "a b"}
    within = dc.replace(c, larger=dc.replace(c.larger, max_step_time_ratio=5.0))
    assert "slow" not in {a.kind for a in check_larger(cand, big, within)}


def test_a_crash_at_the_larger_size_says_out_of_memory() -> None:
    c = parse_criteria(SECTION, "c.toml")
    cand = RunRecords.from_records(_steps(12, 0.01), RunEnd(exit_code=0))
    line = "RuntimeError: [enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't " \
           "allocate memory: you tried to allocate 68719476736 bytes."
    big = RunRecords.from_records(_steps(1, 0.01), RunEnd(
        exit_code=1, error_type="RuntimeError", error_message=line.split(": ", 1)[1],
        tail=("Traceback (most recent call last):", line)))
    (alarm,) = check_larger(cand, big, c)
    assert (alarm.kind, alarm.evidence.cause) == ("crashed", "out-of-memory")
    assert alarm.title.startswith("at batch=64, seq=a b: RuntimeError")


def _log(criteria: Criteria) -> list[ev.Event]:
    s = "s1"
    mem = {"memory": {"where": "host", "peak_bytes": 3 * 2**30, "fraction": 0.25}}
    return [
        ev.SessionStarted(session_id=s, project=".", target="cpu", criteria=criteria.to_dict()),
        ev.RunStarted(session_id=s, run_id="c1", role="candidate", attempt=1, command="a",
                      target="cpu"),
        ev.RunFinished(session_id=s, run_id="c1", exit_code=0, outcome="passed", steps=12,
                       steady_step_s=0.010, device={"memory": {"where": "host",
                                                               "peak_bytes": 2**30}}),
        ev.RunStarted(session_id=s, run_id="b1", role="larger", attempt=1, command="b",
                      target="cpu"),
        ev.RunFinished(session_id=s, run_id="b1", exit_code=0, outcome="passed", steps=4,
                       steady_step_s=0.025, compile_s=1.5, device=mem),
    ]


def test_the_fold_the_report_prints() -> None:
    ledger = fold(_log(parse_criteria(SECTION, "c.toml")))
    (row,) = larger_inputs(ledger)
    assert (row["run"], row["candidate_run"], row["attempt"]) == ("b1", "c1", 1)
    assert row["line"] == ("at batch=64, seq=a b: passed after 4 step(s); peak host memory "
                           "3.00 GiB (25%) vs 1.00 GiB; steady step 25 ms vs 10 ms (2.5×); "
                           "1.5 s of preparation")
    # no attempt of the agent's, and no side of the performance sentence
    assert ledger.attempts == 1
