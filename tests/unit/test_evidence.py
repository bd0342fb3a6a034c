"""Typed alarm evidence (issue 39 item 2): one Struct per alarm kind, written by the checks,
carried on the wire and kept in the store as the same JSON the dicts were, read back from any
stored dict (an older session's, an imported export's) without failing."""

from __future__ import annotations

import json

import msgspec
import pytest
from check_runs import clipping_port, every_alarm, every_kind

from portside.core.checks import KINDS
from portside.core.checks.evidence import (
    EVIDENCE,
    UNSET,
    ClippingChanged,
    Evidence,
    Hardware,
    NumericDrift,
    likely_causes,
    read,
    to_wire,
    unknown,
)
from portside.core.checks.runtime import FACT_KEYS
from portside.core.log import events as ev


def test_every_kind_has_its_struct_and_the_checks_write_it() -> None:
    assert set(EVIDENCE) == set(KINDS)
    assert all(issubclass(cls, Evidence) and cls is not Evidence for cls in EVIDENCE.values())
    raised = every_kind()
    assert set(raised) == set(KINDS)  # check_runs raises every kind, the checks' own way
    for kind, alarm in raised.items():
        assert type(alarm.evidence) is EVIDENCE[kind], kind


def test_the_device_facts_are_fields_of_the_hardware_evidence() -> None:
    names = {f.encode_name for f in msgspec.structs.fields(Hardware)}
    assert set(FACT_KEYS) <= names


@pytest.mark.parametrize("alarm", every_alarm(), ids=lambda a: a.key)
def test_the_wire_reads_back_to_the_same_json(alarm) -> None:  # type: ignore[no-untyped-def]
    event = ev.decode(ev.encode(alarm.raised("s", "cand-1")))
    assert isinstance(event, ev.AlarmRaised) and event.evidence == alarm.wire
    back = read(event.check, event.evidence)
    assert type(back) is type(alarm.evidence)
    # the same keys, the same values of the same types (3 stays 3; the log sorts the keys)
    assert json.dumps(to_wire(back), sort_keys=True) == json.dumps(alarm.wire, sort_keys=True)
    assert unknown(event.check, event.evidence) == {}


def test_what_the_checks_leave_out_stays_out() -> None:
    got = {a.kind: a for a in clipping_port()}
    drift = got["numeric-drift"].evidence
    assert isinstance(drift, NumericDrift)
    assert drift.test is UNSET and "test" not in got["numeric-drift"].wire  # an excursion
    assert likely_causes(drift) == ["clipping-changed"]  # causes.py's, on the consequence
    assert likely_causes(got["clipping-changed"].evidence) == []


def test_old_and_foreign_shapes_read_without_failing() -> None:
    # An older session's clipping evidence: fields this version never wrote, fields missing,
    # a value of another type; nothing raises, what reads is kept.
    old = {"ref_max_norm": 1.0, "cand_max_norm": 0.05, "clipped_share": [0.03, 1.0],
           "candidate": {"max_norm": [0.05], "steps": "forty", "clipped_share": 1.0},
           "references": [{"max_norm": [1.0]}, "not a run"], "reason": 7}
    e = read("clipping-changed", old)
    assert isinstance(e, ClippingChanged)
    assert e.candidate is not UNSET and e.candidate.max_norm == [0.05]
    assert e.candidate.steps is UNSET and e.candidate.clipped_share == 1.0
    assert e.reason is UNSET and e.references is not UNSET and len(e.references) == 2
    assert unknown("clipping-changed", old) == {  # what did not read, to show as it is
        "ref_max_norm": 1.0, "cand_max_norm": 0.05, "clipped_share": [0.03, 1.0], "reason": 7}
    # NaN as the wire writes it, a kind this version does not know, not a dict at all
    assert str(read("non-finite", {"value": "nan"}).value) == "nan"  # type: ignore[attr-defined]
    assert type(read("a-kind-from-later", {"x": 1})) is Evidence
    assert read("slow", None) == EVIDENCE["slow"]() and to_wire(read("slow", [1, 2])) == {}
