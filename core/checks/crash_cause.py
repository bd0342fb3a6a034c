"""Why a run failed, in one vocabulary scripts can rely on (the crash alarm's `evidence.cause`).

Each cause points to a different next step (the TorchTPU note): memory wants a smaller batch or
sharding, an unsupported op wants a rewrite or a lowering, a CUDA-only call wants the XLA
device, a missing dependency wants the GPU-only library replaced, a compile error wants the
graph simplified, a collective timeout wants the launch fixed, a data error wants the input
pipeline fixed.

The exception's own line (type: message) decides first; only when it names no cause are the
run's last lines read, newest first, from its first traceback on (chained exceptions and a
DataLoader worker's original traceback included), so a warning printed before (torch's "no
NVIDIA driver" on a CPU host that probes CUDA) cannot outvote the error that ended the run.
Without a traceback (a kill, a C++ abort) every line is read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

CAUSES = ("out-of-memory", "unsupported-op", "cuda-only", "missing-dependency", "compile-error",
          "collective-timeout", "data-error", "unknown")

# In the order they are tried on one line: a line can name two ("CUDA out of memory" is memory,
# "BackendCompilerFailed ... NotImplementedError" is the compile).
_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("out-of-memory", re.compile(
        r"out of memory|OutOfMemory|\bMemoryError\b|RESOURCE_EXHAUSTED|can't allocate memory|"
        r"Cannot allocate memory|OOM[- ]kill|memory limit|max_memory|ResourceExhausted|"
        r"Attempting to reserve .* bytes|exceeds the (HBM|device) memory", re.IGNORECASE)),
    ("compile-error", re.compile(
        r"BackendCompilerFailed|torch\._dynamo\.exc|InductorError|torch\._inductor\.exc|"
        r"CompilationError|XLA compilation|[Cc]ompilation fail|failed to compile|"
        r"is currently not supported in Torchscript|torch\.jit\.frontend|NotSupportedError|"
        r"TorchScript|Failed to lower|StableHLO|mlir::")),
    ("cuda-only", re.compile(
        r"Torch not compiled with CUDA|Found no NVIDIA driver|No CUDA GPUs are available|"
        r"CUDA driver version is insufficient|Cannot initialize CUDA|torch\.cuda\.is_available\(\) "
        r"is False|deserialize object on a CUDA device|NCCL is not available|"
        r"ProcessGroupNCCL is only supported with GPUs|doesn't have NCCL built in|"
        r"Expected one of cpu.* device type at start of device string: cuda|"
        r"no kernel image is available", re.IGNORECASE)),
    ("missing-dependency", re.compile(
        r"ModuleNotFoundError|No module named|ImportError|cannot open shared object file|"
        r"undefined symbol|DLL load failed|command not found|CommandNotFound")),
    ("unsupported-op", re.compile(
        r"NotImplementedError|not implemented for|Could not run '[^']+' with arguments from|"
        r"is not currently implemented for|no lowering|Lowering .* not implemented|"
        r"UNIMPLEMENTED|[Uu]nsupported (op|operator|operation|dtype)|"
        r"is not supported (on|for|by) (the )?(XLA|TPU|MPS|device)|"
        # torch's fused optimizers on a device without the kernel (the HF Trainer's default
        # adamw_torch_fused on XLA)
        r"`fused=True` requires all the params to be floating point Tensors of supported "
        r"devices")),
    ("collective-timeout", re.compile(
        r"DistStoreError|DistNetworkError|RendezvousTimeout|RendezvousError|"
        r"[Tt]imed out (after .* )?waiting for (clients|workers|peers|the store)|"
        r"Watchdog caught collective operation timeout|collective operation timeout|"
        r"Socket Timeout|init_process_group.*time(d )?out|barrier.*time(d )?out|"
        r"XLA_COORDINATOR|DEADLINE_EXCEEDED|Connection (reset|refused) by peer .*(store|rank)")),
    ("data-error", re.compile(
        r"DataLoader worker|torch/utils/data/|_MultiProcessingDataLoaderIter|"
        r"stack expects each tensor to be equal size|default_collate")),
)
MAX_LINE = 300


def cause_of_line(line: str) -> str | None:
    for cause, rx in _RULES:
        if rx.search(line):
            return cause
    return None


def classify(error_type: str | None, error_message: str | None,
             lines: Iterable[str] = ()) -> tuple[str, str]:
    """(cause, the line that shows it) for a run that did not exit 0; ("unknown", "") when
    nothing it said names a cause."""
    first = f"{error_type}: {error_message}" if error_type and error_message else (
        error_type or error_message or "")
    head = first.splitlines()[0] if first else ""
    for text in (head, first):
        hit = cause_of_line(text)
        if hit:
            return hit, _clip(head if hit == cause_of_line(head) else _line_of(first, hit))
    tail: Sequence[str] = list(lines)
    start = next((i for i, line in enumerate(tail)
                  if line.startswith("Traceback (most recent call last)")), 0)
    for line in reversed(tail[start:]):
        hit = cause_of_line(line)
        if hit:
            return hit, _clip(line.strip())
    return "unknown", ""


def _line_of(text: str, cause: str) -> str:
    for line in text.splitlines():
        if cause_of_line(line) == cause:
            return line.strip()
    return text.strip()


def _clip(line: str) -> str:
    return line if len(line) <= MAX_LINE else line[: MAX_LINE - 1] + "…"
