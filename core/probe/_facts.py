"""What the probe says about where a run ran: the `facts` record's device, hardware, world
and versions (FORMAT.md), the process's rank, and the peak memory the exit record carries.

Loaded by path by ``_probe.py`` (stdlib at import; torch and torch_xla only through the
modules it is given), never imports portside. Read once per process or per new parameter
device: nothing here is per-step work.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any


def facts_record(torch: Any, xla: dict[str, Any] | None, *, pid: int, rank: int | None,
                 devices: list[str], dtypes: list[str], pjrt_device: str | None,
                 seed_offset: int, probe_norm: str, loss: Any, now: float) -> dict[str, Any]:
    """A new `facts` record: the step's parameters are on `devices` (its loss's device when
    the probe found no parameters)."""
    facts: dict[str, Any] = {
        "type": "facts",
        "t": now,
        "pid": pid,
        "rank": rank,
        "backend": None,
        "device_kind": "UNKNOWN",
        "device_name": None,
        "device_count": None,
        "real_devices": None,
        "param_devices": devices,
        "param_dtypes": dtypes,
        "versions": versions(torch),
        "pjrt_device": pjrt_device,
        "pjrt_device_runtime": os.environ.get("PJRT_DEVICE"),
        "world_size": None,
        "seed_offset": seed_offset,
        "probe_norm": probe_norm,
        "argv": list(sys.argv),
    }
    # The device the step really ran on: its parameters', else its loss's (a step whose
    # parameters the probe could not find still computed its loss there).
    loss_dev = str(loss.device) if isinstance(loss, torch.Tensor) else None
    facts["loss_device"] = loss_dev
    first = devices[0] if devices else loss_dev
    dev_type = torch.device(first).type if first else "cpu"
    try:
        if dev_type == "xla" and xla is not None:
            _facts_xla(xla, facts, first)
        elif dev_type == "cuda":
            idx = torch.device(first).index or 0
            facts.update(
                backend="cuda",
                device_kind="CUDA",
                device_name=torch.cuda.get_device_name(idx),
                device_count=torch.cuda.device_count(),
            )
        elif dev_type == "tpu":
            _facts_tpu(torch, facts)
        elif dev_type == "cpu":
            facts.update(backend="cpu", device_kind="CPU", device_name=cpu_name(), device_count=1)
        else:
            facts.update(backend=dev_type, device_name=first)
    except Exception as e:
        facts["error"] = f"{type(e).__name__}: {e}"
    if facts["world_size"] is None:
        facts["world_size"] = _facts_world_size()
    return facts


def _facts_world_size() -> int | None:
    ws = os.environ.get("WORLD_SIZE")
    try:
        dist = sys.modules.get("torch.distributed")
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_world_size())
        return int(ws) if ws and ws.isdigit() else 1
    except Exception:
        return None


def _facts_xla(x: dict[str, Any], facts: dict[str, Any], device: str) -> None:
    xm, xr, torch_xla = x["xm"], x["xr"], x["torch_xla"]
    facts["backend"] = "torch_xla"
    # The real hardware, from the runtime; never xr.device_type(), which echoes PJRT_DEVICE.
    facts["device_kind"] = xm.xla_device_hw(device)
    real = getattr(torch_xla, "real_devices", None)
    facts["real_devices"] = list(real()) if real else None
    try:
        facts["device_name"] = xm.xla_device_kind(device)
    except Exception:
        facts["device_name"] = facts["real_devices"][0] if facts["real_devices"] else None
    try:
        facts["device_count"] = int(xr.global_runtime_device_count())
    except Exception:
        facts["device_count"] = len(facts["real_devices"] or [])
    with contextlib.suppress(Exception):
        facts["world_size"] = int(xr.world_size())


def _facts_tpu(torch: Any, facts: dict[str, Any]) -> None:
    # TorchTPU (device 'tpu'). Its is_available() is also true in its xla_cpu mode, so the
    # kind comes from the device name, not from availability.
    tpu = getattr(torch, "tpu", None)
    facts["backend"] = "torch_tpu"
    if tpu is None:
        return
    name = tpu.get_device_name() if hasattr(tpu, "get_device_name") else None
    facts["device_name"] = name
    if hasattr(tpu, "device_count"):
        facts["device_count"] = int(tpu.device_count())
    upper = str(name or "").upper()
    facts["device_kind"] = (
        "TPU" if upper.startswith("TPU") else "CPU" if "CPU" in upper else "UNKNOWN"
    )


def versions(torch: Any) -> dict[str, Any]:
    def version(name: str) -> str | None:
        mod = sys.modules.get(name)  # only what the program imported; importing costs
        return str(getattr(mod, "__version__", "?")) if mod is not None else None

    return {
        "python": sys.version.split()[0],
        "torch": str(torch.__version__),
        "cuda": getattr(torch.version, "cuda", None),
        "torch_xla": version("torch_xla"),
        "torch_tpu": version("torch_tpu"),
        "numpy": version("numpy"),
    }


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "cpu"


def rank(xla: dict[str, Any] | None, is_root: bool) -> int | None:
    """This process's rank: RANK / LOCAL_RANK, else torch.distributed's, else torch_xla's;
    a single process is rank 0 of a world of one, an unranked worker None."""
    for var in ("RANK", "LOCAL_RANK"):
        v = os.environ.get(var)
        if v is not None and v.strip().lstrip("-").isdigit():
            return int(v)
    try:
        dist = sys.modules.get("torch.distributed")
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:
        pass
    if xla is not None:
        try:
            xr = xla["xr"]
            if xr.world_size() > 1:
                return int(xr.global_ordinal())
        except Exception:
            pass
    return 0 if is_root else None


def world_size() -> int:
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_world_size())
    except Exception:
        pass
    ws = os.environ.get("WORLD_SIZE", "")
    return int(ws) if ws.isdigit() and int(ws) > 0 else 1


def peak_memory(xla: bool) -> dict[str, Any]:
    """What the run used at its peak: the process's host RSS high-water mark (the memory that
    matters on a CPU), and the accelerator's peak and size where torch_xla or CUDA knows them.
    Read once, at exit: none of it costs a step anything."""
    out: dict[str, Any] = {}
    try:
        import resource

        out["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB
        out["host_memory_bytes"] = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ImportError, ValueError, OSError):
        pass
    try:
        if xla:
            import torch_xla.core.xla_model as xm

            info = xm.get_memory_info()
            peak = info.get("peak_bytes_used") or info.get("bytes_used")
            if peak:
                out["device_peak_bytes"], out["device_memory_bytes"] = peak, info.get("bytes_limit")
        else:
            torch = sys.modules.get("torch")
            if torch is not None and torch.cuda.is_initialized():
                out["device_peak_bytes"] = torch.cuda.max_memory_allocated()
                out["device_memory_bytes"] = torch.cuda.get_device_properties(0).total_memory
    except Exception:  # XLA:CPU and old runtimes have no memory info: the host's figure stands
        pass
    return out
