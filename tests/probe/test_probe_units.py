"""Pure helpers of the probe and its collaborators, loaded by path the way sitecustomize loads
them (_probe.py loads the modules beside it)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

from portside.core.probe import probe_dir


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "_probe_under_test", probe_dir().parent / "_probe.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_non_finite_numbers_survive_json() -> None:
    p = load()
    line = json.dumps(
        [p._values.num(float("nan")), p._values.num(float("inf")),
         p._values.num(float("-inf")), p._values.num(1.5)],
        allow_nan=False,
    )
    assert json.loads(line) == ["nan", "inf", "-inf", 1.5]


def test_file_names_beside_the_main_file() -> None:
    p = load()
    w = p._writer
    assert w.suffixed("/r/probe.jsonl", ".rank3") == "/r/probe.rank3.jsonl"
    assert w.suffixed("/r/probe", ".pid7") == "/r/probe.pid7"
    assert w.file_for("/r/probe.jsonl", 0, 7) == "/r/probe.jsonl"
    assert w.file_for("/r/probe.jsonl", 2, 7) == "/r/probe.rank2.jsonl"
    assert w.file_for("/r/probe.jsonl", None, 7) == "/r/probe.pid7.jsonl"


def test_seed_shift() -> None:
    p = load()
    assert p._shift_seed(41, 1, None) == 42
    assert p._shift_seed(2**32 - 1, 1, 2**32) == 0  # numpy's range
    assert p._shift_seed(None, 1, None) is None  # OS entropy stays OS entropy
    assert p._shift_seed("abc", 2, None) == "abc+2"
    assert p._shift_seed(b"abc", 2, None) == b"abc+2"
    assert p._shift_seed([1, 2], 2, None) == [1, 2]
    seen: list[object] = []
    wrapped = p._seed_wrapper(lambda a=None, version=2: seen.append((a, version)), 5, None)
    wrapped(1)
    wrapped(a=1, version=1)  # random.seed's keyword
    wrapped()
    assert seen == [(6, 2), (6, 1), (None, 2)]
    assert p._seed_wrapper(wrapped, 5, None) is wrapped  # never shifted twice


def test_xla_norm_stride_follows_the_median_not_one_slow_sample() -> None:
    p = load()._xla
    # a norm costing 5% of its step's time is 1% at every 5th step: the floor, 10, holds
    cheap = 5 * p.NORM_BUDGET
    slow = 26 * p.NORM_BUDGET  # one sample on a busy machine (seen in CI: stride 26)
    assert p.norm_stride([slow], 10, 10) == 10  # too few samples to decide
    assert p.norm_stride([slow, cheap], 10, 10) == 10
    assert p.norm_stride([slow, cheap, cheap], 10, 10) == 10
    assert p.norm_stride([cheap, slow, cheap, slow, cheap], 10, 10) == 10
    # a norm that really costs that much each time stretches it, up to the cap
    assert p.norm_stride([slow, slow, cheap], 10, 10) == 26
    assert p.norm_stride([10 * slow] * 3, 10, 10) == p.NORM_MAX_STRIDE
    # and it shrinks back to the floor when the cost falls
    assert p.norm_stride([slow, cheap, cheap, cheap, slow], 10, 26) == 10


def test_written_lines_are_json_dumps_and_sealed_as_seal_line(tmp_path: Path) -> None:
    """The probe's own encoder (a C encoder made once) and its HMAC (keyed once, copied per
    line) write what json.dumps and core/run/seal.py's seal_line would."""
    from portside.core.run import seal

    p = load()
    key = seal.new_key()
    writer = p._writer.RecordWriter(str(tmp_path / "probe.jsonl"), key.encode(), lambda: 0)

    class Odd:  # an object json cannot encode: written as str(), as default=str does
        def __str__(self) -> str:
            return "odd \u00e9"

    recs = [
        {"type": "step", "t": 1796170319.8086743, "loss": p._values.num(float("nan")),
         "lr": [0.1, 1e-300], "grad_norm": None, "ok": True, "text": 'quote " \\ \n'},
        {"type": "facts", "versions": {"torch": "2.13"}, "dtype": Odd(), "argv": ["a", "b"]},
    ]
    writer.write([dict(r) for r in recs])
    writer.write([dict(recs[0])])  # seq goes on across flushes
    lines = (tmp_path / "probe.jsonl").read_text().splitlines()
    want = [dict(recs[0]), dict(recs[1]), dict(recs[0])]
    for i, (line, rec) in enumerate(zip(lines, want, strict=True)):
        body = json.dumps(rec, default=str, allow_nan=False)
        assert line == seal.seal_line(key, f'{body[:-1]}, "seq": {i}}}')
        raw, why = seal.check_line(key.encode(), line.encode())
        assert why == "" and json.loads(raw)["seq"] == i


def test_steps_are_packed_sealed_and_numbered_one_a_line(tmp_path: Path) -> None:
    """The writer as the probe makes it: a flush's steps of one shape are one packed line,
    sealed and numbered as any line; the reader's expansion is the records as written one a
    line; a run JSON cannot hold packed (a NaN among Nones) goes one a line, made safe."""
    from portside.core.probe import _packed
    from portside.core.run import seal

    p = load()
    key = seal.new_key()
    writer = p._writer.RecordWriter(str(tmp_path / "probe.jsonl"), key.encode(), lambda: 0,
                                    p._values.finite, p._packed.runs)

    def step(i: int, **kw: object) -> dict:
        return {"type": "step", "t": 1.5 + i, "pid": 9, "rank": 0, "step": i, "loss": 0.25 * i,
                "grad_norm": 2.0, "lr": [0.1 / (i + 1)], "step_s": 0.001 * i, **kw}

    first = [{"type": "facts", "t": 1.0, "pid": 9, "rank": 0}, *[step(i) for i in range(5)]]
    nan = [step(5, loss=None), step(6, loss=float("nan")), step(7)]
    writer.write([dict(r) for r in first])
    writer.write([dict(r) for r in nan])
    lines = (tmp_path / "probe.jsonl").read_text().splitlines()
    got = []
    for i, line in enumerate(lines):
        raw, why = seal.check_line(key.encode(), line.encode())
        assert why == ""
        rec = json.loads(raw)
        assert rec.pop("seq") == i
        got.append(rec)
    assert [r["type"] for r in got] == ["facts", "steps", "step", "step", "step"]
    expanded = [x for r in got for x in _packed.expand(r)]
    assert expanded == [*first, *nan[:1], dict(nan[1], loss="nan"), nan[2]]
