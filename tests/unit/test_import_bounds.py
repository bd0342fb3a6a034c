"""Values the store cannot hold are refused at the door with file:line (issue 13 item 10),
and the fuzz harness finds no traceback in a bounded run (the full 50k: tests/bench)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from portside.store import Store
from portside.store import exports as ex
from portside.store.jsonl import RecordingError, import_file

ROOT = Path(__file__).parents[2]
RECORDING = ROOT / "sessions" / "recordings" / "recompilation-storm.jsonl"


def _with(tmp_path: Path, line: int, edit) -> Path:  # type: ignore[no-untyped-def]
    lines = RECORDING.read_bytes().splitlines()
    obj = json.loads(lines[line - 1])
    edit(obj)
    lines[line - 1] = json.dumps(obj).encode()
    out = tmp_path / "bad.jsonl"
    out.write_bytes(b"\n".join(lines) + b"\n")
    return out


def _nest(depth: int) -> object:
    v: object = 0
    for _ in range(depth):
        v = [v]
    return v


def _records(obj: dict, value: object) -> None:  # type: ignore[type-arg]
    obj["records"] = [{"type": "step", "step": value}]


def _first_record_line() -> int:
    for n, raw in enumerate(RECORDING.read_bytes().splitlines(), start=1):
        if b'"run.record"' in raw:
            return n
    raise AssertionError("no run.record in the recording")


@pytest.mark.parametrize(("line", "edit", "expect"), [
    (2, lambda o: o.update(ts=1e18), r":2: field ts: .*<= 253402300799"),
    (3, lambda o: o.update(ts=-5.0), r":3: field ts: .*>= 0"),
    (2, lambda o: o.update(seq=2**64), r":2: field seq: .*<= 9223372036854775807"),
    (0, lambda o: _records(o, 2**70), r":\d+: field records: integer 1180591620717411303424"),
    (0, lambda o: _records(o, _nest(70)), r":\d+: field records: nested deeper than 64"),
    (1, lambda o: o.update(session_id="x\x1b]52;c;aGk=\x07"), r":1: header field session_id"),
    (1, lambda o: o.update(session_id="[/b]"), r":1: header field session_id"),
])
def test_refused_with_file_and_line(tmp_path: Path, line: int, edit, expect: str) -> None:  # type: ignore[no-untyped-def]
    line = line or _first_record_line()
    path = _with(tmp_path, line, edit)
    with Store(tmp_path / "p.db") as store:
        with pytest.raises(RecordingError, match=expect):
            import_file(store, path)
        assert store.sessions() == []  # refused whole


def test_refused_with_deep_nesting_built_by_hand(tmp_path: Path) -> None:
    lines = RECORDING.read_bytes().splitlines()
    n = _first_record_line()
    lines[n - 1] = lines[n - 1].replace(b'"records":[', b'"records":[' + b"[" * 100_000
                                        + b"]" * 100_000 + b",", 1)
    path = tmp_path / "deep.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    with Store(tmp_path / "p.db") as store, pytest.raises(RecordingError, match=f":{n}: "):
        import_file(store, path)


def test_lists_survive_what_was_imported(tmp_path: Path) -> None:
    with Store(tmp_path / "p.db") as store:
        import_file(store, RECORDING)
        bad = _with(tmp_path, 2, lambda o: o.update(ts=1e18))
        with pytest.raises(RecordingError):
            import_file(store, bad, rename_to="second")
        assert len(store.sessions()) == 1
        assert "| total |" in ex.stats_md(ex.stats(store)).lower() or ex.stats_md(ex.stats(store))


@pytest.mark.slow  # a fuzzer: 1500 inputs, up to a minute
def test_fuzz_import_bounded() -> None:
    spec = importlib.util.spec_from_file_location("fuzz_import", ROOT / "tests/bench/fuzz_import.py")
    assert spec is not None and spec.loader is not None
    fuzz = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fuzz)
    out = fuzz.run(1500, seed=7, budget_s=60)
    assert out["failures"] == [], "\n".join(out["failures"][:5])
    assert out["refused"] > 0 and out["imported"] > 0
