"""non-finite: a NaN or inf loss or gradient norm the probe really saw (not a value the
backend did not report), and whether the references had it too."""

from __future__ import annotations

import math

import numpy as np

from portside.core.log.criteria import Criteria

from .alarms import Alarm
from .evidence import NonFinite
from .records.comparison import Comparison


def check_nonfinite(c: Comparison, criteria: Criteria) -> list[Alarm]:
    refs, cand = c.refs, c.cand
    alarms = []
    for name, mask, vals in (("loss", cand.loss_nonfinite, cand.loss),
                             ("grad_norm", cand.grad_norm_nonfinite, cand.grad_norm)):
        if not mask.any():
            continue
        i = int(np.argmax(mask))
        fin = np.flatnonzero(np.isfinite(vals[:i]))
        severity = "critical"
        note = ""
        if name == "grad_norm" and not cand.loss_nonfinite.any() and any(
                r.grad_norm_nonfinite.any() for r in refs):
            # fp16 loss scaling skips overflow steps: the references do it too, loss is fine.
            severity, note = "warning", " (references have non-finite gradient norms too)"
        alarms.append(Alarm(
            "non-finite", severity,
            f"{name} is {_word(vals[i])} at step {int(cand.steps[i])}{note}",
            NonFinite(series=name, first_step=int(cand.steps[i]), value=float(vals[i]),
                      count=int(mask.sum()),
                      last_finite_step=int(cand.steps[fin[-1]]) if fin.size else None,
                      last_finite_value=float(vals[fin[-1]]) if fin.size else None),
            key=f"non-finite:{name}"))
    return alarms


def _word(v: float) -> str:
    return "NaN" if math.isnan(v) else ("+inf" if v > 0 else "-inf")
