"""The performance and cost sentence (core/log/performance.py), folded from run events whose
figures are worked out here by hand from the shipped price table."""

from __future__ import annotations

import pytest

from portside.core.log import events as ev
from portside.core.log.ledger import fold
from portside.core.log.performance import performance

SID = "20261202-perf"
H100 = {"device_kind": "CUDA", "device_name": "NVIDIA H100 80GB HBM3", "device_count": 1}
V5E = {"device_kind": "TPU", "device_name": "TPU v5 lite", "device_count": 4}


def _run(run_id: str, role: str, attempt: int, outcome: str, wall: float, device: dict,
         steady: float | None = None, compile_s: float = 0.0,
         threads: int = 0) -> list[ev.Event]:
    return [ev.RunStarted(session_id=SID, run_id=run_id, role=role, attempt=attempt,  # type: ignore[arg-type]
                          command="python train.py", target="tpu", threads=threads),
            ev.RunFinished(session_id=SID, run_id=run_id, exit_code=0 if outcome == "passed"
                           else 1, outcome=outcome, wall_s=wall, compile_s=compile_s,
                           steady_step_s=steady, steps=100, device=device)]


def test_the_sentence_counts_failed_retries_and_preparation() -> None:
    events = [ev.SessionStarted(session_id=SID, project="/p", target="tpu"),
              *_run("ref1", "reference", 0, "passed", 3600.0, H100, steady=0.040),
              *_run("cand1", "candidate", 1, "failed-error", 600.0, V5E),
              *_run("cand2", "candidate", 2, "passed", 1800.0, V5E, steady=0.021,
                    compile_s=41.0)]
    perf = performance(fold(events))
    assert perf is not None
    # H100 $6.88/h x 1 h; v5e $1.20/chip-hour x 4 chips x (10 + 30) min = $3.20, the failed
    # attempt's $0.80 included: 3.20 / 6.88 = 0.465, 53% cheaper; 40 / 21 ms = 1.9x
    assert round(perf["cost_ratio"], 3) == 0.465
    assert round(perf["throughput_ratio"], 3) == 1.905
    assert perf["line"] == (
        "candidate 1.9× the reference's steady throughput (21 ms vs 40 ms a step), 53% cheaper "
        "per successful run ($3.20 vs $6.88, 1 failed attempt included); 41.0 s of "
        "preparation first (reference 0.0 s); 4 device(s) vs 1")


def test_no_sentence_before_both_sides_passed() -> None:
    events = [ev.SessionStarted(session_id=SID, project="/p", target="tpu"),
              *_run("ref1", "reference", 0, "passed", 60.0, H100, steady=0.04),
              *_run("cand1", "candidate", 1, "failed-error", 60.0, V5E)]
    assert performance(fold(events)) is None


def test_runs_that_shared_the_machine_say_so() -> None:
    # parallel = 2 here: the references ran at once, each on its share of the cores; the
    # candidate, alone after them, reads faster than it is. The sentence says why.
    cpu = {"device_kind": "CPU", "device_name": "cpu", "device_count": 1}
    for threads, said in ((1, True), (0, False)):
        events = [ev.SessionStarted(session_id=SID, project="/p", target="cpu"),
                  *_run("ref1", "reference", 1, "passed", 3.5, cpu, 0.000546, threads=threads),
                  *_run("ref2", "reference", 2, "passed", 3.5, cpu, 0.000546, threads=threads),
                  *_run("cand1", "candidate", 1, "passed", 2.8, cpu, 0.000464, threads=threads)]
        perf = performance(fold(events))
        assert perf is not None
        assert perf["reference"]["shared_machine"] is said
        assert ("shared this machine" in perf["line"]) is said, perf["line"]


CPU = {"device_kind": "CPU", "device_name": "cpu", "device_count": 1}


def test_prices_carry_the_digits_their_difference_needs() -> None:
    # Issue 41.6: "20% dearer ($0.0001 vs $0.0001)". Two tiny CPU runs a few seconds long.
    events = [ev.SessionStarted(session_id=SID, project="/p", target="cpu"),
              *_run("ref1", "reference", 1, "passed", 2.0, CPU, 0.001),
              *_run("cand1", "candidate", 1, "passed", 2.4, CPU, 0.001)]
    perf = performance(fold(events))
    assert perf is not None and "20% dearer" in perf["line"], perf["line"]
    cand_usd, ref_usd = perf["line"].split("per successful run (")[1].split(")")[0].split(" vs ")
    assert cand_usd != ref_usd, perf["line"]
    assert float(cand_usd.strip("$")) / float(ref_usd.strip("$")) == pytest.approx(1.2, rel=0.02)


def test_references_far_apart_make_the_speed_not_meaningful() -> None:
    # Issue 41.6: the same tiny trainer read 0.29 to 72 ms a step on a busy machine; a ratio
    # from such runs states the machine's load. The sentence says so, with their range.
    events = [ev.SessionStarted(session_id=SID, project="/p", target="cpu"),
              *_run("ref1", "reference", 1, "passed", 3.0, CPU, 0.00029),
              *_run("ref2", "reference", 2, "passed", 9.0, CPU, 0.072),
              *_run("cand1", "candidate", 1, "passed", 3.0, CPU, 0.0008)]
    perf = performance(fold(events))
    assert perf is not None
    assert perf["throughput_ratio"] is None and perf["speed_not_meaningful"]
    assert "not meaningful" in perf["line"] and "0.29 ms to 72 ms" in perf["line"], perf["line"]
    assert "× the reference's steady throughput" not in perf["line"]


def test_a_sides_steady_step_is_the_median_of_its_runs() -> None:
    # Three references within the spread limit: the odd one does not pull the figure (a mean
    # of 20, 21 and 29 ms would be 23.3 ms).
    events = [ev.SessionStarted(session_id=SID, project="/p", target="cpu"),
              *_run("ref1", "reference", 1, "passed", 3.0, CPU, 0.020),
              *_run("ref2", "reference", 2, "passed", 3.0, CPU, 0.021),
              *_run("ref3", "reference", 3, "passed", 3.0, CPU, 0.029),
              *_run("cand1", "candidate", 1, "passed", 3.0, CPU, 0.021)]
    perf = performance(fold(events))
    assert perf is not None and perf["reference"]["steady_step_s"] == pytest.approx(0.021)
    assert perf["throughput_ratio"] == pytest.approx(1.0)
