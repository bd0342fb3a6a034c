"""The pure trace compare: tolerances by dtype, call order, one-sided names, bad files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from portside.core.localize.traces import TraceError, compare, differs, parse_trace, read_trace


def ev(kind: str, name: str, norm: float, step: int = 0, dtype: str = "float32",
       shape: tuple[int, ...] = (4, 4), **kw: object) -> dict:
    return {"type": kind, "step": step, "name": name, "call": 0, "out": "", "shape": list(shape),
            "dtype": dtype, "norm": norm, "mean": kw.pop("mean", 0.1), "absmax": norm / 2,
            "proj": 0.01, **kw}


def trace(*events: dict, steps: int = 1) -> list[str]:
    recs = [{"type": "trace", "version": 1}, *events, {"type": "trace_end", "steps": steps}]
    return [json.dumps(r) for r in recs]


def run(ref: list[str], cand: list[str]) -> dict:
    return compare(parse_trace(ref), parse_trace(cand))


def test_fp32_last_bits_agree_a_real_change_does_not() -> None:
    a = ev("module", "fc", 10.0)
    assert differs(a, dict(a, norm=10.0 * (1 + 3e-7))) is None  # a few ulps: CPU vs XLA
    why = differs(a, dict(a, norm=10.0 * (1 + 1e-3)))
    assert why is not None and why.startswith("norm")


def test_bf16_tolerance_is_wider_and_dtype_change_is_a_difference() -> None:
    a = ev("module", "fc", 10.0, dtype="bfloat16")
    assert differs(a, dict(a, norm=10.05)) is None
    assert differs(a, dict(a, norm=10.5)) is not None
    assert differs(ev("module", "fc", 10.0), a) == "dtype float32 vs bfloat16"


def test_mean_is_judged_against_the_rms_not_itself() -> None:
    # A centred tensor: its mean is ~0 and differs relatively a lot between backends.
    a = ev("module", "fc", 100.0, shape=(100,), mean=1e-7)
    assert differs(a, dict(a, mean=-1e-7)) is None
    assert differs(a, dict(a, mean=0.5)) is not None


def test_update_tolerance_allows_for_the_weights_magnitude() -> None:
    # update = after - before: ~eps * |weights| of rounding, large relative to a tiny update.
    a = ev("update", "w", 1e-4, base=10.0)
    assert differs(a, dict(a, norm=1e-4 + 1e-6)) is None
    assert differs(dict(a, base=0.0), dict(a, norm=1e-4 + 1e-6, base=0.0)) is not None
    assert differs(a, dict(a, norm=2e-4)) is not None


def test_nan_on_one_side_only_differs() -> None:
    a = ev("loss", "loss", 1.0)
    assert differs(a, dict(a, norm="nan")) is not None
    assert differs(dict(a, norm="nan"), dict(a, norm="nan")) is None


def test_first_divergence_in_call_order_with_evidence() -> None:
    ref = trace(ev("input", "args", 5.0), ev("module", "a", 2.0, cls="Linear"),
                ev("module", "b", 3.0, cls="ReLU"), ev("loss", "loss", 1.0, shape=()))
    cand = trace(ev("input", "args", 5.0), ev("module", "a", 2.0, cls="Linear"),
                 ev("module", "b", 3.5, cls="ReLU"), ev("loss", "loss", 1.2, shape=()))
    d = run(ref, cand)["divergence"]
    assert (d["kind"], d["name"], d["step"]) == ("module", "b", 0)
    assert d["reference"]["norm"] == 3.0 and d["candidate"]["norm"] == 3.5


def test_class_change_under_one_name_and_one_sided_names() -> None:
    ref = trace(ev("module", "a", 2.0, cls="ReLU"), ev("module", "x", 2.0, cls="Linear"))
    cand = trace(ev("module", "extra", 2.0, cls="Dropout"), ev("module", "a", 2.0, cls="GELU"))
    out = run(ref, cand)
    assert out["divergence"]["reason"] == "module class ReLU vs GELU"
    assert out["divergence"]["after_candidate_only"] == ["extra"]
    assert out["only_reference"]["modules"] == ["x"]
    assert out["only_candidate"]["modules"] == ["extra"]


def test_changed_weight_shape_is_architecture_not_weights() -> None:
    ref = trace(ev("param", "fc.weight", 2.0, shape=(4, 4)), ev("module", "fc", 1.0))
    cand = trace(ev("param", "fc.weight", 2.0, shape=(8, 4)), ev("module", "fc", 1.5))
    out = run(ref, cand)
    assert out["divergence"]["kind"] == "module"
    assert out["architecture"] == ["fc.weight: [4, 4] -> [8, 4]"]


def test_unaligned_weights_are_the_divergence() -> None:
    out = run(trace(ev("param", "w", 2.0)), trace(ev("param", "w", 2.5)))
    assert (out["divergence"]["kind"], out["divergence"]["name"]) == ("weights", "w")


def test_only_steps_both_sides_recorded_are_compared() -> None:
    ref = trace(ev("loss", "loss", 1.0, step=0), ev("loss", "loss", 1.0, step=1), steps=2)
    cand = trace(ev("loss", "loss", 1.0, step=0), steps=1)
    out = run(ref, cand)
    assert out["divergence"]["kind"] == "none" and out["steps_compared"] == 1
    # A side that crashed inside step 1 is compared as far as it got.
    crashed = trace(ev("loss", "loss", 1.0, step=0), ev("loss", "loss", 9.0, step=1), steps=1)
    out = run(ref, crashed)
    assert (out["divergence"]["kind"], out["divergence"]["step"]) == ("loss", 1)


def test_bad_trace_names_file_and_line(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    p.write_text('{"type": "trace"}\n{not json\n')
    with pytest.raises(TraceError, match=r"t\.jsonl:2: not JSON"):
        read_trace(p)
    p.write_text('{"type": "module", "step": 0, "name": "a"}\n')
    with pytest.raises(TraceError, match="no 'trace' header"):
        read_trace(p)
    p.write_text('{"type": "trace"}\n{"type": "module", "name": "a"}\n')
    with pytest.raises(TraceError, match=r":2: module record without 'step'"):
        read_trace(p)
    with pytest.raises(TraceError, match="cannot read"):
        read_trace(tmp_path / "missing.jsonl")


def test_wrapper_prefixes_do_not_split_the_names() -> None:
    # The candidate wrapped its model in DDP / torch.compile: the same modules by name.
    ref = trace(ev("module", "encoder.0", 2.0, cls="Linear"), ev("grad", "encoder.0.weight", 1.0))
    cand = trace(ev("module", "module.encoder.0", 2.0, cls="Linear"),
                 ev("grad", "_orig_mod.encoder.0.weight", 1.5))
    out = run(ref, cand)
    assert (out["divergence"]["kind"], out["divergence"]["name"]) == ("gradient", "encoder.0.weight")
    assert out["only_candidate"] == {"modules": [], "params": []}
