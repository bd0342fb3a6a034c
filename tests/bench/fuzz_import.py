"""Mutated recordings through `import`: zero tracebacks, every refusal names file:line.

    .venv/bin/python -m tests.bench.fuzz_import [COUNT=50000] [SEED=13]

Each case mutates one of the shipped recordings (bytes flipped, lines dropped, duplicated,
swapped or cut, fields set to hostile values: ts=1e18, ints past 64 bits, deep nesting, escape
sequences and rich markup in ids, invalid UTF-8) and imports it into a real SQLite store. A
case passes when the import succeeds, or is refused with a RecordingError / StoreError whose
message starts with `FILE:LINE:`. Anything else is a failure, printed with its traceback. After
the cases, the lists a user reads (`sessions`, `stats`) are built over everything imported.
"""

from __future__ import annotations

import json
import random
import re
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SEEDS = [ROOT / "sessions" / "recordings" / n
         for n in ("recompilation-storm.jsonl", "silent-cpu-default.jsonl")]

HOSTILE: list[object] = [
    1e18, -1e18, -1, 0, 2**63, 2**64, -(2**63) - 1, 10**40, 1e308, -0.0, True, None, "", [], {},
    "nan", "inf", "\x1b]52;c;cHduZWQ=\x07", "\x1b[2J\x1b]0;pwned\x07", "[/b]", "[bold]x[/",
    "\x00", "a" * 5000, "\u202e", ["x"] * 3, {"k": 1}, 253402300800.0, 253402300799.0,
]


def _nest(depth: int) -> object:
    v: object = 1
    for _ in range(depth):
        v = [v]
    return v


def _paths(obj: object, prefix: tuple = ()) -> list[tuple]:
    out = [prefix] if prefix else []
    if isinstance(obj, dict):
        for k, v in list(obj.items())[:30]:
            out += _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:5]):
            out += _paths(v, (*prefix, i))
    return out


def _set(obj: object, path: tuple, value: object) -> None:
    for k in path[:-1]:
        obj = obj[k]  # type: ignore[index]
    obj[path[-1]] = value  # type: ignore[index]


def mutate(rng: random.Random, lines: list[bytes]) -> bytes:
    lines = list(lines)
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        op = rng.randrange(10)
        i = rng.randrange(len(lines))
        if op == 0 and lines[i]:  # flip a byte
            b = bytearray(lines[i])
            b[rng.randrange(len(b))] = rng.randrange(256)
            lines[i] = bytes(b)
        elif op == 1 and len(lines) > 1:
            del lines[i]
        elif op == 2:
            lines.insert(i, lines[rng.randrange(len(lines))])
        elif op == 3:
            j = rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == 4:  # cut the file
            data = b"\n".join(lines)
            return data[: rng.randrange(len(data) + 1)]
        elif op == 5:  # raw junk: invalid UTF-8, NUL, a huge line
            lines[i] = rng.choice((b"\xff\xfe\x00", b"\x00" * 10, b"{" * 100000, b"[1" * 1000,
                                   b'{"kind": 1}', lines[i] + b"\xc3"))
        else:  # a hostile value in a field of an event (or the header)
            try:
                obj = json.loads(lines[i])
            except (ValueError, RecursionError):
                continue
            paths = _paths(obj)
            if not paths:
                continue
            path = rng.choice(paths)
            value = _nest(rng.choice((65, 100, 3000, 100000))) if op == 9 else rng.choice(HOSTILE)
            if path[-1] == "kind" and rng.random() < 0.5:
                value = rng.choice(("run.finished", "alarm.raised", "intervention", "bogus"))
            _set(obj, path, value)
            try:
                lines[i] = json.dumps(obj).encode()
            except (ValueError, RecursionError):
                continue
    return b"\n".join(lines) + b"\n"


def run(count: int, seed: int = 13, budget_s: float | None = None) -> dict[str, object]:
    """Import ``count`` mutated recordings; returns counts and the failures (tracebacks)."""
    from portside.store import Store, StoreError
    from portside.store import exports as ex
    from portside.store.jsonl import RecordingError, import_file

    rng = random.Random(seed)
    seeds = [p.read_bytes().splitlines() for p in SEEDS]
    failures: list[str] = []
    imported = refused = 0
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as d:
        tmp = Path(d)
        src = tmp / "case.jsonl"
        where = re.compile(re.escape(str(src)) + r":\d+: ")
        store = Store(tmp / "fuzz0.db")
        n = 0
        for n in range(count):
            if budget_s is not None and time.monotonic() - t0 > budget_s:
                break
            if n and n % 2000 == 0:  # keep the file small: a fresh store now and then
                _check_lists(store, ex, failures)
                store.close()
                store = Store(tmp / f"fuzz{n}.db")
            src.write_bytes(mutate(rng, rng.choice(seeds)))
            try:
                import_file(store, src, rename_to=f"f{n}" if rng.random() < 0.9 else None)
                imported += 1
            except (RecordingError, StoreError) as exc:
                refused += 1
                if not where.match(str(exc)):
                    failures.append(f"case {n}: refusal without file:line: {exc}")
            except BaseException:
                failures.append(f"case {n}: {traceback.format_exc()}")
                (tmp.parent / f"portside-fuzz-case-{n}.jsonl").write_bytes(src.read_bytes())
        _check_lists(store, ex, failures)
        store.close()
    return {"cases": n + 1, "imported": imported, "refused": refused, "failures": failures,
            "seconds": round(time.monotonic() - t0, 1)}


def _check_lists(store: object, ex: object, failures: list[str]) -> None:
    """What `sessions` and `stats` read must hold for whatever was imported."""
    try:
        import datetime as dt

        for row in store.sessions():  # type: ignore[attr-defined]
            if row["started_at"]:
                dt.datetime.fromtimestamp(row["started_at"], dt.UTC)
        ex.stats_md(ex.stats(store))  # type: ignore[attr-defined]
    except BaseException:
        failures.append(f"lists: {traceback.format_exc()}")


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 13
    out = run(count, seed)
    fails = out.pop("failures")
    print(json.dumps(out))
    for f in fails[:20]:  # type: ignore[union-attr]
        print(f)
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
