"""The one rule for "did this run train on the wanted hardware", shared by the check and the views.

The wrong-hardware check and the Checks panel's hardware lines both ask it, so a candidate the
check passes can never be marked ✖ on screen (the panel once compared target "xla" with
device_kind "CPU" by prefix and drew a false ✖ on a correct XLA:CPU port).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from portside.core.log.costs import tpu_generation

XLA_BACKENDS = ("torch_xla", "torch_tpu")


@dataclass(frozen=True)
class HardwareFinding:
    kind: str  # "wrong-hardware" | "unverified-hardware"
    severity: str  # "error" | "warning"
    why: str


def hardware_findings(target: str, facts: dict[str, Any] | None) -> list[HardwareFinding]:
    """What is wrong with these device facts for `target` (empty: it is the wanted hardware).

    cpu: device_kind CPU (an XLA backend on CPU is a warning: it is XLA:CPU, not plain CPU);
    cuda: CUDA; xla: an XLA backend (torch_xla/torch_tpu) on any real device; xla:cpu: an XLA
    backend on CPU; tpu: an XLA backend on TPU; tpu:vXX: and the device name names that
    generation (a name without one: unverified). Device count is the check's (it needs the
    criteria and the ranks).
    """
    facts = facts or {}
    backend = str(facts.get("backend") or "")
    kind = str(facts.get("device_kind") or "UNKNOWN").upper()
    name = str(facts.get("device_name") or "")
    is_xla = backend in XLA_BACKENDS
    want_kind = {"cpu": "CPU", "cuda": "CUDA", "xla:cpu": "CPU"}.get(
        target, "TPU" if target.startswith("tpu") else None)
    out: list[HardwareFinding] = []
    if kind == "UNKNOWN":
        return [HardwareFinding("unverified-hardware", "warning",
                                f"real device kind unknown (backend {backend or '?'}): cannot "
                                f"verify target {target}")]
    if want_kind and kind != want_kind:
        out.append(HardwareFinding("wrong-hardware", "error",
                                   f"it ran on {kind} ({name or backend})"))
    elif target in ("xla", "xla:cpu", "tpu") or target.startswith("tpu:"):
        if not is_xla:
            out.append(HardwareFinding("wrong-hardware", "error",
                                       f"backend is {backend or 'unknown'}, not torch_xla/torch_tpu"))
    elif target == "cpu" and is_xla:
        out.append(HardwareFinding("wrong-hardware", "warning",
                                   f"it ran through {backend} (XLA:CPU), not plain CPU"))
    if target.startswith("tpu:") and kind == "TPU" and not out:
        gen = tpu_generation(name)
        if gen is None:
            out.append(HardwareFinding("unverified-hardware", "warning",
                                       f"TPU generation not in the device name {name!r}: cannot "
                                       f"verify {target}"))
        elif gen != "tpu-" + target.split(":", 1)[1]:
            out.append(HardwareFinding("wrong-hardware", "error", f"it ran on {name}"))
    return out


def is_wanted_hardware(target: str, facts: dict[str, Any] | None) -> bool:
    """No error-level finding: what a view marks ✓ (warnings are shown as ⚠, not ✖)."""
    return not any(f.severity == "error" for f in hardware_findings(target, facts))
