"""Events: one tagged union, a canonical codec, errors that name the field."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tiers import examples

from portside.core.log import events as ev

text = st.text(max_size=40)
floats = st.floats(allow_nan=False, allow_infinity=False, width=64)
json_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | floats | text
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=12,
)
times = st.floats(0.0, ev.MAX_TS)  # the bounds decode enforces (see core/log/events.py)
int64s = st.integers(ev.INT64_MIN, ev.INT64_MAX)
common = {"session_id": st.text(min_size=1, max_size=20), "seq": st.integers(0, 2**40), "ts": times}


def _strategy(cls: type[ev.Event]) -> st.SearchStrategy[ev.Event]:
    overrides = {
        "evidence": st.dictionaries(text, json_values, max_size=4),
        "criteria": st.dictionaries(text, json_values, max_size=4),
        "meta": st.dictionaries(text, json_values, max_size=4),
        "device": st.dictionaries(text, json_values, max_size=4),
        "input": st.dictionaries(text, json_values, max_size=4),
        "records": st.lists(st.dictionaries(text, json_values, max_size=4), max_size=4),
        "metrics": st.dictionaries(text, floats | st.sampled_from(["nan", "inf", "-inf"]), max_size=4),
    }
    fields = {}
    hints = {f.name: f.type for f in msgspec.structs.fields(cls)}
    for name in cls.__struct_fields__:
        if name in common:
            fields[name] = common[name]
        elif name in overrides:
            fields[name] = overrides[name]
        elif hints[name] is float:
            fields[name] = floats  # finite by contract (see core/log/events.py)
        elif hints[name] == ev.Ts:
            fields[name] = times
        elif hints[name] == ev.Int:
            fields[name] = int64s
        elif hints[name] == ev.Int | None:
            fields[name] = st.none() | int64s
    return st.builds(cls, **fields)


any_event = st.one_of([_strategy(cls) for cls in ev.EVENT_TYPES.values()])


@settings(max_examples=examples(400), deadline=None)
@given(any_event)
def test_every_event_round_trips_byte_stable(event: ev.Event) -> None:
    data = ev.encode(event)
    back = ev.decode(data)
    assert back == event
    assert ev.encode(back) == data
    assert json.loads(data)["kind"] == type(event).__struct_config__.tag


def test_every_design_kind_exists() -> None:
    for kind in [
        "session.started",
        "session.ended",
        "agent.text",
        "agent.tool_call",
        "agent.tool_result",
        "agent.usage",
        "agent.claimed",
        "edit.proposed",
        "edit.decided",
        "edit.applied",
        "edit.reverted",
        "run.started",
        "run.output",
        "run.record",
        "run.finished",
        "alarm.raised",
        "alarm.acknowledged",
        "alarm.cleared",
        "intervention",
    ]:
        assert kind in ev.EVENT_TYPES


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b'{"kind":"intervention","session_id":"s","seq":"x"}', "field seq"),
        (b'{"kind":"nope","session_id":"s"}', "field kind: unknown event kind"),
        (b'{"kind":"agent.text","session_id":"s"}', "field text: missing"),
        (b'{"session_id":"s"}', "field kind: missing"),
        (b'{"kind":"run.started","session_id":"s","run_id":"r","role":"judge",'
         b'"attempt":1,"command":"c","target":"t"}', "field role"),
        (b"{oops", "not valid JSON"),
    ],
)
def test_bad_events_name_the_field(raw: bytes, message: str) -> None:
    with pytest.raises(ev.EventError, match=message):
        ev.decode(raw)


def test_steering_actions_are_known_kinds() -> None:
    assert set(ev.INTERVENTION_KINDS) >= ev.STEERING_ACTIONS
