"""Step values into JSON numbers: the tensors a step record holds (loss, grad norm, lr...).

Loaded by path by ``_probe.py``; stdlib only, torch through the objects it is given.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# The record fields that may hold tensors (besides the lr list).
VALUE_KEYS = ("loss", "grad_norm", "max_norm", "clip_value", "param_sum")


def num(x: float | int | None) -> float | int | str | None:
    """A JSON-safe number: non-finite floats become strings, so a NaN loss survives."""
    if x is None or isinstance(x, (int, str)) or x - x == 0:  # x - x: 0 when finite
        return x
    if x != x:
        return "nan"
    if x in (float("inf"), float("-inf")):
        return "inf" if x > 0 else "-inf"
    return x


def _plain(v: Any) -> Any:
    """A value that is not a tensor, as the record keeps it."""
    if v is None or type(v) is float:  # most lr values
        return v if v is None or v - v == 0 else num(v)
    if isinstance(v, float):
        return num(float(v))
    return v


def resolve(torch: Any, recs: list[dict[str, Any]], force: bool) -> None:
    """Replace the tensors in these records (those still marked `_wait`) by numbers. Values
    on an XLA device are read only with `force` (else null: reading could make the host wait
    or compile)."""
    Tensor = torch.Tensor

    def value(v: Any) -> Any:
        return _read(v, force) if isinstance(v, Tensor) else _plain(v)

    for rec in recs:
        if rec.pop("_wait", None) is not None:
            _convert(rec, value)


def finite(rec: dict[str, Any]) -> None:
    """A record of plain numbers (no tensors) made JSON-safe in place: what `resolve` does
    for them, done only for the rare record the encoder refuses."""
    _convert(rec, _plain)


def _convert(rec: dict[str, Any], value: Callable[[Any], Any]) -> None:
    """`value` of each of the record's step values, in place."""
    for key in VALUE_KEYS:
        if key in rec:
            rec[key] = value(rec[key])
    lr = rec.get("lr")
    if lr:
        rec["lr"] = [value(v) for v in lr]


def _read(v: Any, force: bool) -> Any:
    if not v.is_cpu and v.device.type == "xla":
        if not force:
            return None
        v = v.cpu()  # a transfer; .item() on the device tensor counts as a CPU fallback
    return num(v.item())
