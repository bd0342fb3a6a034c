"""Steps packed by column (core/probe/_packed.py): what the reader expands is what the probe
would have written one record a line, as json.loads reads it; a malformed packed record is a
clear ValueError, never a crash nor a silent loss. Ground truth: json's own round trip."""

from __future__ import annotations

import base64
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tiers import examples

from portside.core.probe import _packed


def one_a_line(recs: list[dict]) -> list[dict]:
    """What the probe wrote before packing: each record made JSON-safe (non-finite floats as
    strings, FORMAT.md), dumped and read back."""
    def safe(v: object) -> object:
        if isinstance(v, float) and not math.isfinite(v):
            return "nan" if v != v else ("inf" if v > 0 else "-inf")
        if isinstance(v, list):
            return [safe(x) for x in v]
        return v
    return [json.loads(json.dumps({k: safe(v) for k, v in r.items()}, allow_nan=False))
            for r in recs]


def through_a_line(recs: list[dict]) -> list[dict]:
    """Packed as the writer packs them, through JSON text, expanded as the runner expands."""
    out: list[dict] = []
    for rec, rows in _packed.runs(recs):
        try:
            line = json.dumps(rec, allow_nan=False)
        except ValueError:  # the writer writes these rows one a line instead
            out.extend(one_a_line(rows))
            continue
        back = json.loads(line)
        out.extend(_packed.expand(back))
    return out


def step(i: int, **kw: object) -> dict:
    rec = {"type": "step", "t": 1796332838.1285799 + i / 7, "pid": 41, "rank": 0, "step": i,
           "opt": 0, "source": "optimizer", "loss": 0.5 / (i + 1), "backward_calls": 1,
           "grad_norm": 1.25 + i, "grad_norm_source": "clip", "max_norm": 1.0, "clip_calls": 1,
           "lr": [1e-3 * math.cos(i)], "step_s": 0.00133 * (1 + i % 3), "sched_steps": i}
    rec.update(kw)
    return rec


def test_a_flush_of_usual_steps_is_one_line_that_expands_to_them() -> None:
    recs = [step(i) for i in range(20)]
    items = _packed.runs(recs)
    assert len(items) == 1 and items[0][0]["type"] == "steps" and items[0][1] == recs
    line = json.dumps(items[0][0], allow_nan=False)
    back = _packed.unpack(json.loads(line))
    assert back == one_a_line(recs)
    assert [list(r) for r in back] == [list(r) for r in recs]  # the keys in their order
    # Floats go out as doubles: exact, however many digits repr would need.
    assert [r["t"] for r in back] == [r["t"] for r in recs]
    # Every record holds its own lr list (a constant column is copied per row).
    back[0]["lr"].append(9.0)
    assert back[1]["lr"] == recs[1]["lr"]


def test_non_finite_values_come_back_as_the_strings_a_line_would_hold() -> None:
    recs = [step(0, loss=float("nan")), step(1, grad_norm=float("inf")),
            step(2, lr=[float("-inf")]), step(3)]
    assert through_a_line(recs) == one_a_line(recs)
    assert through_a_line(recs)[0]["loss"] == "nan"


def test_types_are_kept_apart_where_python_calls_them_equal() -> None:
    # 1 == 1.0 == True: a column of them is not one constant.
    recs = [step(0, opt=1), step(1, opt=1.0), step(2, opt=True), step(3, opt=None)]
    back = through_a_line(recs)
    assert [type(r["opt"]) for r in back] == [int, float, bool, type(None)]


def test_records_of_other_shapes_break_the_run() -> None:
    recs = [step(0), step(1), step(2, epoch=1), step(3, epoch=1), {"type": "facts", "t": 1.0,
            "pid": 41, "rank": 0}, step(4), step(5, norm_type=1.0)]
    items = _packed.runs(recs)
    assert [it[0]["type"] for it in items] == ["steps", "steps", "facts", "step", "step"]
    assert through_a_line(recs) == one_a_line(recs)


def test_a_column_json_cannot_hold_leaves_the_run_one_a_line() -> None:
    # A NaN among None in a column of mixed kinds: the JSON list refuses it, so the writer
    # falls back to one record a line (tested through the writer in tests/probe).
    recs = [step(0, loss=None), step(1, loss=float("nan")), step(2)]
    with pytest.raises(ValueError):
        json.dumps(_packed.runs(recs)[0][0], allow_nan=False)
    assert through_a_line(recs) == one_a_line(recs)


@pytest.mark.parametrize("change, why", [
    ({"n": 0}, "n must be"),
    ({"n": 10**9}, "n must be"),
    ({"n": "3"}, "n must be"),
    ({"keys": "type"}, "keys must be"),
    ({"cols": []}, "one column"),
    ({"keys": ["type", "type"], "cols": [{"c": "step"}, {"c": "step"}]}, "one column"),
    ({"cols": [{"c": "step"}, {"d": "!!"}]}, "not base64"),
    ({"cols": [{"c": "step"}, {"d": base64.b64encode(b"\0" * 16).decode()}]}, "holds 2 values"),
    ({"cols": [{"c": "step"}, {"j": [1, 2]}]}, "does not hold 3"),
    ({"cols": [{"c": "step"}, {"x": 1}]}, "no known kind"),
    ({"cols": [{"c": "step"}, {"c": 1, "d": ""}]}, "malformed"),
    ({"cols": [{"c": "step"}, {"l": "", "k": 0}]}, "bad k"),
    ({"cols": [{"c": "facts"}, {"c": 1.0}]}, "not a step record"),
])
def test_a_malformed_packed_record_says_what_is_wrong(change: dict, why: str) -> None:
    rec = {"type": "steps", "t": 1.0, "pid": 1, "rank": 0, "n": 3, "keys": ["type", "t"],
           "cols": [{"c": "step"}, {"c": 1.0}]}
    assert _packed.unpack(rec) == [{"type": "step", "t": 1.0}] * 3
    with pytest.raises(ValueError, match=why):
        _packed.unpack({**rec, **change})


floats = st.floats(allow_nan=True, allow_infinity=True)
values = st.one_of(st.none(), st.booleans(), st.integers(-2**40, 2**40), floats,
                   st.text(max_size=5), st.lists(floats, min_size=1, max_size=3))


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(["loss", "grad_norm", "lr", "opt", "x"]), values,
                                max_size=4), min_size=1, max_size=12))
def test_any_steps_come_back_as_one_a_line_would(rows: list[dict]) -> None:
    recs = [{"type": "step", **r} for r in rows]
    assert through_a_line(recs) == one_a_line(recs)
