"""Is the evidence the run's own? ``evidence-tampered`` (critical) when it is not.

Three tests, each of something the candidate's code could fake alone but not all together:
- the seal (core/run/seal.py): every probe record checked by the runner as it was read; a record
  that failed is a ``tamper`` record of portside's, and one is enough;
- the hardware seen from outside (core/run/observe.py): facts that claim a TPU, a GPU or
  torch_xla while the run's processes, read by portside after it received those facts, had no
  such runtime mapped from a file the run cannot write and no such device (a character device
  of the driver) open;
- printed metrics against the probe's: an ``[output]`` pattern named like a probe series
  (loss, grad_norm, lr) with a ``step`` group must agree with the probe at the same steps
  whenever it agrees in the references (which print the same way): a reference that prints a
  running average never agrees, and then the candidate is not held to it either.

The records are folded into each run's `Integrity` (records/integrity.py); this judges them.
"""

from __future__ import annotations

import numpy as np

from portside.core.log.criteria import Criteria

from .alarms import Alarm
from .evidence import EvidenceTampered
from .records.comparison import Comparison
from .records.records import RunRecords

__all__ = ["check_integrity"]

AGREE = 0.8  # share of steps at which a printed value must match the probe's
_CLAIMS = {"TPU": "tpu", "CUDA": "cuda"}
_WHAT = {"tpu": "libtpu mapped, /dev/accel* or /dev/vfio/* open",
         "cuda": "libcuda mapped, /dev/nvidia* open",
         "torch_xla": "torch_xla's _XLAC mapped"}


def check_integrity(c: Comparison, criteria: Criteria) -> list[Alarm]:
    references, candidate = c.refs, c.cand
    out: list[Alarm] = []
    e = candidate.integrity
    if e.failed:
        first = e.failures[0] if e.failures else {}
        out.append(_alarm(f"{e.failed} probe record(s) failed their check: {first.get('why')}",
                          EvidenceTampered(reason="seal", failed=e.failed,
                                           first=e.failures[:5]),
                          "seal"))
    hw = _hardware(candidate)
    if hw is not None:
        out.append(hw)
    out += _printed(references, candidate)
    return out


def _alarm(title: str, evidence: EvidenceTampered, aspect: str) -> Alarm:
    return Alarm("evidence-tampered", "critical", f"evidence tampered: {title}", evidence,
                 key=f"evidence-tampered:{aspect}")


def _hardware(candidate: RunRecords) -> Alarm | None:
    facts = candidate.facts or {}
    needs = [k for k in (_CLAIMS.get(str(facts.get("device_kind") or "").upper()),
                         "torch_xla" if facts.get("backend") == "torch_xla" else None) if k]
    seen = candidate.integrity.observed
    if not needs or seen is None:
        return None
    # Both times portside's own: the last sample that saw the run alive, and when the runner
    # read the claim (logs before issue 38: the claim's own `t`, a Python process's sample).
    at = seen.get("alive_at", seen.get("python_at"))
    claimed_at = facts.get("received_at", facts.get("t"))
    if not isinstance(at, int | float) or not isinstance(claimed_at, int | float) or at < claimed_at:
        return None  # no process of the run was read after the claim: nothing to hold it to
    kinds = seen.get("seen") or {}
    missing = [k for k in needs if k not in kinds]
    if not missing:
        return None
    need = missing[0]
    claim = (f"{facts.get('device_kind')} ({facts.get('device_name')})" if need != "torch_xla"
             else "torch_xla")
    return _alarm(f"facts claim {claim} but no process of the run had {_WHAT[need]}",
                  EvidenceTampered(reason="hardware",
                                   claimed={k: facts.get(k) for k in
                                            ("backend", "device_kind", "device_name",
                                             "device_count", "real_devices")},
                                   observed=kinds, samples=seen.get("samples"),
                                   processes=seen.get("processes")), "hardware")


def _agreement(pairs: list[tuple[int, float]], rr: RunRecords, name: str) -> float | None:
    """The best share of printed values equal to the probe's at their step (or one step off:
    0- vs 1-based counters); None with fewer than 5 comparable steps."""
    if len(pairs) < 5 or rr.n == 0 or not rr.steps_increasing():
        return None
    steps, vals = rr.steps, rr.series(name)
    at = np.array([s for s, _ in pairs], dtype=np.int64)
    printed = np.array([v for _, v in pairs], dtype=np.float64)
    best: float | None = None
    for off in (0, -1, 1):
        idx = np.searchsorted(steps, at + off)
        ok = idx < steps.size
        idx = np.where(ok, idx, 0)
        ok &= steps[idx] == at + off
        probe = vals[idx]
        ok &= np.isfinite(probe) & np.isfinite(printed)
        if ok.sum() < 5:
            continue
        close = np.abs(printed - probe) <= 0.01 * np.maximum(np.abs(printed), np.abs(probe)) + 5e-3
        share = float((close & ok).sum() / ok.sum())
        best = share if best is None else max(best, share)
    return best


def _printed(references: list[RunRecords], candidate: RunRecords) -> list[Alarm]:
    out = []
    for name, pairs in candidate.integrity.printed.items():
        refs = [_agreement(r.integrity.printed.get(name, []), r, name) for r in references]
        if not refs or any(a is None or a < AGREE for a in refs):
            continue  # the references do not print the probe's value: no yardstick
        got = _agreement(pairs, candidate, name)
        if got is not None and got < AGREE:
            out.append(_alarm(f"printed {name} disagrees with the probe's at "
                              f"{1 - got:.0%} of the steps (the references agree)",
                              EvidenceTampered(reason="printed", series=name, agreement=got,
                                               reference_agreement=refs, printed=pairs[:10]),
                              f"printed:{name}"))
    return out
