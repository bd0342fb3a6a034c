"""Step records packed by column: several consecutive step records of one shape in one line.

Why: turning a float into JSON text (CPython's shortest repr) costs ~0.8 us, and a step
record holds six of them; written one line a step, the encoding was a third of the probe's
cost between torch's kernels. Packed, the floats of a flush go out as raw IEEE doubles in one
base64 string, the repeated values once, and the line is sealed once. The reader
(core/run/watch_records.py) expands a packed line back into the very records it stands for, so
nothing past the runner sees the difference. Layout: FORMAT.md, "Packed steps".

Loaded by path by ``_probe.py`` (stdlib only) and imported by the runner to expand: the two
sides of the layout live here together.
"""

from __future__ import annotations

import base64
import binascii
import math
import sys
from array import array
from collections.abc import Callable
from typing import Any

TYPE = "steps"
MAX_ROWS = 4096  # records one packed line may stand for (the probe writes at most a flush's)
_LE = sys.byteorder == "little"


def _doubles(values: Any) -> str:
    a = array("d", values)
    if not _LE:
        a.byteswap()  # the line holds little-endian doubles on every host
    return base64.b64encode(a.tobytes()).decode("ascii")


def runs(recs: list[dict[str, Any]]) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """The records to write for `recs`, in order, each with the records it stands for: every
    run of two or more consecutive step records of one shape packed (the ``steps`` record),
    the rest as they are."""
    out: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    i, n = 0, len(recs)
    while i < n:
        r = recs[i]
        j = i + 1
        if r.get("type") == "step":
            keys = tuple(r)
            while j < n and recs[j].get("type") == "step" and tuple(recs[j]) == keys:
                j += 1
        if j - i >= 2:
            out.append((pack(recs[i:j]), recs[i:j]))
        else:
            out.append((r, [r]))
        i = j
    return out


def pack(recs: list[dict[str, Any]]) -> dict[str, Any]:
    """One packed record for these step records, which share one shape (the same keys in
    the same order: `runs` groups them so). Columns: ``{"c": v}`` one value for every row;
    ``{"d": b64}`` floats; ``{"l": b64, "k": k}`` lists of k floats each (the lr list);
    ``{"j": [...]}`` anything else, as JSON. The caller encodes it (a JSON error: write the
    records one a line instead)."""
    keys = tuple(recs[0])
    n = len(recs)
    cols: list[dict[str, Any]] = []
    # One pass in C turns the rows into columns.
    for col in zip(*[r.values() for r in recs], strict=True):
        v0 = col[0]
        kinds = set(map(type, col))
        if len(kinds) == 1 and col.count(v0) == n and (type(v0) is not float or
                                                       math.isfinite(v0)):
            cols.append({"c": v0})
        elif kinds == {float}:
            cols.append({"d": _doubles(col)})
        elif kinds == {list} and (k := len(v0)) and all(len(v) == k for v in col) and \
                set(map(type, [x for v in col for x in v])) == {float}:
            cols.append({"l": _doubles([x for v in col for x in v]), "k": k})
        else:
            cols.append({"j": list(col)})
    # As every record: its time, pid and rank (the first row's), so the reader numbers the
    # line in its process's sequence (seq counts lines, FORMAT.md).
    head = recs[0]
    return {"type": TYPE, "t": head.get("t"), "pid": head.get("pid"), "rank": head.get("rank"),
            "n": n, "keys": list(keys), "cols": cols}


def _floats(text: Any, count: int, fix: Callable[[float], Any]) -> list[Any]:
    if not isinstance(text, str):
        raise ValueError("a float column is not a string")
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as e:
        raise ValueError(f"a float column is not base64: {e}") from None
    if len(raw) != 8 * count:
        raise ValueError(f"a float column holds {len(raw) // 8} values, not {count}")
    a = array("d")
    a.frombytes(raw)
    if not _LE:
        a.byteswap()
    return [fix(x) for x in a]


def _json_safe(x: float) -> Any:
    """As the probe writes a float one a line: non-finite ones are strings (FORMAT.md)."""
    if x - x == 0:
        return x
    if x != x:
        return "nan"
    return "inf" if x > 0 else "-inf"


def unpack(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """The step records a packed record stands for, in its order, each with its keys in the
    order they were written. A malformed one raises ValueError saying what is wrong."""
    n, keys, cols = rec.get("n"), rec.get("keys"), rec.get("cols")
    if type(n) is not int or not 1 <= n <= MAX_ROWS:
        raise ValueError(f"packed steps: n must be 1..{MAX_ROWS}, not {n!r}")
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise ValueError("packed steps: keys must be a list of strings")
    if not isinstance(cols, list) or len(cols) != len(keys) or len(set(keys)) != len(keys):
        raise ValueError("packed steps: one column for each of distinct keys")
    values: list[list[Any]] = []
    for key, col in zip(keys, cols, strict=True):
        if not isinstance(col, dict) or len(col) != (2 if "l" in col else 1):
            raise ValueError(f"packed steps: column {key!r} is malformed")
        if "c" in col:
            c = col["c"]  # a list (an lr list) is copied: each record holds its own
            values.append([c.copy() for _ in range(n)] if isinstance(c, (list, dict))
                          else [c] * n)
        elif "d" in col:
            values.append(_floats(col["d"], n, _json_safe))
        elif "l" in col:
            k = col.get("k")
            if type(k) is not int or not 1 <= k <= MAX_ROWS:
                raise ValueError(f"packed steps: column {key!r} has a bad k {k!r}")
            flat = _floats(col["l"], n * k, _json_safe)
            values.append([flat[i:i + k] for i in range(0, n * k, k)])
        elif "j" in col:
            if not isinstance(col["j"], list) or len(col["j"]) != n:
                raise ValueError(f"packed steps: column {key!r} does not hold {n} values")
            values.append(col["j"])
        else:
            raise ValueError(f"packed steps: column {key!r} has no known kind")
    out = [dict(zip(keys, row, strict=True)) for row in zip(*values, strict=True)]
    if any(r.get("type") != "step" for r in out):
        raise ValueError("packed steps: a row is not a step record")
    return out


def expand(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """The records one written line stands for: a packed one's steps, any other as itself."""
    return unpack(rec) if rec.get("type") == TYPE else [rec]
