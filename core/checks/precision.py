"""precision-changed: the candidate trained in another precision than the references —
parameter dtypes, autocast (its dtype; the device type is the port's own business), the
default dtype, float32 matmul precision, torch_xla's precision switches (XLA_USE_BF16 and
the like).

fp16 autocast ported to bf16 autocast (the GradScaler dropped with it) is how TPUs train: the
default criteria allow it ("precision.float16->bfloat16"), and it is reported as info.
Whether a GradScaler ran is evidence, not compared: a bf16 port needs none.
"""

from __future__ import annotations

from typing import Any

import msgspec

from portside.core.log.criteria import Criteria

from .alarms import Alarm
from .evidence import PrecisionChanged
from .records.comparison import Comparison
from .settings import agreed, alarm, allowed, change, reference_facts, same

COMPARED = ("param_dtypes", "autocast", "default_dtype", "matmul_precision", "env")
FP16_TO_BF16 = "float16->bfloat16"


def _view(p: dict[str, Any]) -> dict[str, Any]:
    out = {k: p.get(k) for k in COMPARED}
    # torch.bfloat16 -> bfloat16; autocast "cuda:torch.float16" -> float16 (device left out)
    out["autocast"] = sorted({str(m).rsplit(":", 1)[-1].replace("torch.", "")
                              for m in p.get("autocast") or []}) or None
    out["param_dtypes"] = sorted(str(t).replace("torch.", "") for t in p.get("param_dtypes") or [])
    out["default_dtype"] = str(p.get("default_dtype") or "").replace("torch.", "") or None
    return out


def check_precision(c: Comparison, criteria: Criteria) -> list[Alarm]:
    refs, cand = c.refs, c.cand
    ref_p = [_view(p) for p in reference_facts(refs, "precision") if isinstance(p, dict)]
    mine = (cand.facts or {}).get("precision")
    if not ref_p or not isinstance(mine, dict):
        return []
    cv, rv = _view(mine), ref_p[0]
    changes = []
    for key in COMPARED:
        if not agreed([r[key] for r in ref_p]):
            continue
        a, b = cv[key], rv[key]
        if key == "env":
            a, b = a or {}, b or {}
        elif key == "autocast":
            a, b = a or ["off"], b or ["off"]
        if a is None or b is None or same(a, b):
            continue
        ch = change(key, a, b)
        if key == "autocast" and b == ["float16"] and a == ["bfloat16"] \
                and allowed(criteria, "precision", FP16_TO_BF16):
            ch = msgspec.structs.replace(ch, allowed=True)
        changes.append(ch)
    if not changes:
        return []
    return [alarm("precision-changed", "precision", "training precision", changes, criteria,
                  "precision-changed", PrecisionChanged(
                      candidate_grad_scaler=mine.get("grad_scaler"),
                      reference_grad_scaler=reference_facts(refs, "precision")[0].get(
                          "grad_scaler")))]
