"""checks/integrity.py as pure functions: printed metrics held against the probe's where the
references agree with theirs; facts held to what was seen from outside; the live fold and the
rebuild see the same evidence."""

from __future__ import annotations

from typing import Any

from portside.core.checks import Comparison, RunRecords
from portside.core.checks.integrity import check_integrity
from portside.core.checks.records.records_fold import IncrementalRecords
from portside.core.log.criteria import DEFAULT_CRITERIA


def _run(losses: list[float], printed: list[float] | None, offset: int = 0,
         extra: list[dict[str, Any]] | None = None) -> RunRecords:
    recs: list[dict[str, Any]] = [
        {"type": "step", "t": 1.0 + i, "pid": 1, "rank": 0, "step": i, "loss": v}
        for i, v in enumerate(losses)]
    for i, v in enumerate(printed or []):  # as the runner makes them from an [output] pattern
        recs.append({"type": "metric", "name": "loss", "value": v, "step": i + offset,
                     "source": "output", "t": 1.0 + i})
    return RunRecords.from_records(recs + (extra or []))


LOSS = [1.0 / (i + 1) for i in range(40)]


def test_printed_loss_that_is_not_the_trained_loss_is_tampered() -> None:
    refs = [_run(LOSS, [round(v, 4) for v in LOSS])]  # the reference prints what it trains
    honest = _run(LOSS, [round(v, 4) for v in LOSS], offset=1)  # 1-based counter: fine
    forged = _run(LOSS, [v * 0.5 for v in LOSS])  # prints a better loss than it trains
    assert check_integrity(Comparison(refs, honest), DEFAULT_CRITERIA) == []
    alarms = check_integrity(Comparison(refs, forged), DEFAULT_CRITERIA)
    assert [a.key for a in alarms] == ["evidence-tampered:printed:loss"]
    assert alarms[0].severity == "critical" and alarms[0].evidence.agreement < 0.2


def test_no_yardstick_when_the_references_print_something_else() -> None:
    running_mean = [sum(LOSS[: i + 1]) / (i + 1) for i in range(40)]  # a running average
    refs = [_run(LOSS, running_mean)]
    assert check_integrity(Comparison(refs, _run(LOSS, [v * 0.5 for v in LOSS])),
                          DEFAULT_CRITERIA) == []


def test_facts_claiming_a_tpu_against_what_was_seen() -> None:
    facts = {"type": "facts", "t": 10.0, "pid": 1, "rank": 0, "backend": "torch_xla",
             "device_kind": "TPU", "device_name": "TPU v5 lite"}

    def seen(at: float | None, kinds: dict[str, list[str]]) -> dict[str, Any]:
        return {"type": "observed", "source": "portside", "t": 20.0, "samples": 3,
                "processes": 2, "seen": kinds, "python_at": at}

    no_tpu = seen(12.0, {"torch": ["/x/libtorch_cpu.so"]})
    tpu = seen(12.0, {"tpu": ["/x/libtpu.so"], "torch_xla": ["/x/_XLAC.so"],
                      "torch": ["/x/libtorch_cpu.so"]})
    early = seen(9.0, {"torch": ["/x/libtorch_cpu.so"]})  # read only before the claim
    keys = [[a.key for a in check_integrity(Comparison([], _run(LOSS, None, extra=[facts, o])),
                                           DEFAULT_CRITERIA)]
            for o in (no_tpu, tpu, early)]
    assert keys == [["evidence-tampered:hardware"], [], []]
    # Issue 38.2: the claim's own `t` ten years ahead no longer skips the check: the runner's
    # received_at (portside's clock) is what counts.
    ahead = {**facts, "t": 10.0 + 10 * 365 * 86400, "received_at": 10.0}
    (a,) = check_integrity(Comparison([], _run(LOSS, None, extra=[ahead, no_tpu])), DEFAULT_CRITERIA)
    assert a.key == "evidence-tampered:hardware"
    # Issue 38.4: facts saying torch_xla (an xla:cpu run) with no _XLAC mapped
    xla_cpu = {**facts, "device_kind": "CPU", "device_name": "CPU", "received_at": 10.0}
    (a,) = check_integrity(Comparison([], _run(LOSS, None, extra=[xla_cpu, no_tpu])),
                          DEFAULT_CRITERIA)
    assert "torch_xla" in a.title
    assert check_integrity(Comparison([], _run(LOSS, None, extra=[xla_cpu, tpu])),
                          DEFAULT_CRITERIA) == []


def test_the_live_fold_sees_the_same_evidence() -> None:
    recs: list[dict[str, Any]] = [
        {"type": "tamper", "source": "portside", "why": "unsealed record", "file": "a"},
        {"type": "metric", "name": "loss", "value": 0.5, "step": 3, "source": "output"},
        {"type": "observed", "source": "portside", "seen": {}, "python_at": 1.0},
        {"type": "tamper", "source": "portside", "why": "3 more", "count": 3, "file": ""}]
    live = IncrementalRecords()
    live.add(recs[:2])
    live.add(recs[2:])
    a, b = live.snapshot().integrity, RunRecords.from_records(recs).integrity
    assert (a.failed, a.failures, a.observed, a.printed) == (b.failed, b.failures, b.observed,
                                                            b.printed) == (
        4, [{"why": "unsealed record", "file": "a", "line": None},
            {"why": "3 more", "file": "", "line": None}], recs[2], {"loss": [(3, 0.5)]})
