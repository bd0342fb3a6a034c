"""What the probe says about where a run ran: the `facts` record's device, hardware, world
and versions (FORMAT.md), the process's rank, and the peak memory the exit record carries.

Loaded by path by ``_probe.py`` (stdlib at import; torch and torch_xla only through the
modules it is given), never imports portside. Read once per process or per new parameter
device: nothing here is per-step work.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import sys
from typing import Any


def facts_record(torch: Any, xla: dict[str, Any] | None, *, pid: int, rank: int | None,
                 devices: list[str], dtypes: list[str], pjrt_device: str | None,
                 seed_offset: int, probe_norm: str, loss: Any, now: float,
                 params: list[Any] | None = None,
                 shardings: set[str] | None = None) -> dict[str, Any]:
    """A new `facts` record: the step's parameters (`params`) are on `devices` (its loss's
    device when the probe found no parameters); `shardings`: `loss_shardings` of the first
    backward's loss."""
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
    try:
        compute_devices(torch, xla, facts, params or [], shardings)
    except Exception as e:
        facts["compute_devices_error"] = f"{type(e).__name__}: {e}"
    return facts


# --- the devices the step computed on ----------------------------------------------------------

# A sharding as XLA prints it: the tile assignment's shape, then its devices (listed, or iota
# `<=[dims]` with an optional transpose), then which trailing tile dimensions are subgroups.
_SHARDING = re.compile(r"devices=\[([\d,]+)\]((?:\d+,)*\d+|<=\[[\d,]+\](?:T\([\d,]+\))?)"
                       r"( last_tile_dim_replicate| last_tile_dims=\{[^}]*\})?")
MAX_SHARDINGS = 8  # distinct shardings the facts keep as evidence


def _tile_devices(assign: str) -> list[int]:
    """The devices of a tile assignment, in its row-major order."""
    if not assign.startswith("<="):
        return [int(x) for x in assign.split(",")]
    m = re.fullmatch(r"<=\[([\d,]+)\](?:T\(([\d,]+)\))?", assign)
    if m is None:
        raise ValueError(f"tile assignment {assign!r}")
    dims = [int(x) for x in m.group(1).split(",")]
    if not m.group(2):
        n = 1
        for d in dims:
            n *= d
        return list(range(n))
    perm = [int(x) for x in m.group(2).split(",")]
    strides = [1] * len(dims)
    for k in range(len(dims) - 2, -1, -1):
        strides[k] = strides[k + 1] * dims[k + 1]
    # iota over `dims`, transposed by `perm`: position c holds the iota value at c un-permuted
    return [sum(c[i] * strides[perm[i]] for i in range(len(perm)))
            for c in itertools.product(*(range(dims[p]) for p in perm))]


def hlo_shardings(hlo: str) -> set[str]:
    """The distinct `sharding={...}` annotations of an HLO module's text (braces balanced: a
    tuple's sharding holds one per element)."""
    out: set[str] = set()
    at = hlo.find("sharding={")
    while at >= 0:
        start = i = at + len("sharding=")
        depth = 0
        while i < len(hlo):
            depth += {"{": 1, "}": -1}.get(hlo[i], 0)
            i += 1
            if depth == 0:
                break
        out.add(hlo[start:i])
        at = hlo.find("sharding={", i)
    return out


def sharding_pieces(spec: str) -> dict[int, tuple[int, ...]]:
    """Which piece of a tensor each device holds under one sharding: {device: tile coordinates
    over the dimensions that split the data}. Replication (`{replicated}`, `{maximal ...}`,
    replicated trailing subgroups) gives every device the same piece; manual subgroups hold
    pieces of their own. Empty for a spec without a tile assignment."""
    out: dict[int, tuple[int, ...]] = {}
    for m in _SHARDING.finditer(spec):
        dims = [int(x) for x in m.group(1).split(",")]
        devs = _tile_devices(m.group(2))
        tail = (m.group(3) or "").strip()
        kinds = (["replicated"] if tail == "last_tile_dim_replicate" else
                 [k.strip() for k in tail[len("last_tile_dims={"):-1].split(",")] if tail else [])
        keep = [True] * (len(dims) - len(kinds)) + [k == "manual" for k in kinds]
        strides = [1] * len(dims)
        for k in range(len(dims) - 2, -1, -1):
            strides[k] = strides[k + 1] * dims[k + 1]
        for pos, dev in enumerate(devs):
            coord = tuple((pos // strides[k]) % dims[k] for k in range(len(dims)) if keep[k])
            # a tuple sharding: the device's pieces of every element, side by side
            out[dev] = out.get(dev, ()) + coord
    return out


def distinct_work(specs: list[str]) -> tuple[int, int]:
    """(devices whose pieces differ, devices named): a device is counted when the combination
    of pieces it holds across all `specs` is one no other device holds; devices holding the
    same pieces compute the same thing twice, which splits no work."""
    per_dev: dict[int, list[tuple[int, ...]]] = {}
    pieces = [sharding_pieces(s) for s in specs]
    named = sorted({d for p in pieces for d in p})
    for d in named:
        per_dev[d] = [p.get(d, ()) for p in pieces]
    return max(1, len({tuple(v) for v in per_dev.values()})), len(named)


def loss_shardings(xla: dict[str, Any] | None, loss: Any) -> set[str] | None:
    """SPMD: the shardings in the graph that computes `loss`, read at the first backward,
    before any sync can have run it (later the loss may be device data whose graph is gone):
    its HLO names every input's sharding, the batch's included. Lowered once, never compiled
    or executed. None when not SPMD."""
    if xla is None or not _is_spmd(xla):
        return None
    try:
        return hlo_shardings(xla["torch_xla"]._XLAC._get_xla_tensors_hlo([loss]))
    except Exception:
        return set()


def compute_devices(torch: Any, xla: dict[str, Any] | None, facts: dict[str, Any],
                    params: list[Any], shardings: set[str] | None) -> None:
    """`compute_devices`: how many devices did distinct work in the step (FORMAT.md). SPMD
    (one process driving a mesh): the devices whose pieces of the step graph's inputs,
    parameters and annotated values differ (`shardings` of the loss's graph and the
    parameters' own); the figure is the mesh's, the same in every process. Otherwise the
    distinct devices the process's parameters and loss are on (one per rank under torchrun /
    xmp; the checks add the ranks)."""
    devs = list(dict.fromkeys(list(facts.get("param_devices") or [])
                              + ([facts["loss_device"]] if facts.get("loss_device") else [])))
    if facts.get("backend") == "torch_xla" and xla is not None and _is_spmd(xla):
        _compute_spmd(xla, facts, params, shardings)
        return
    facts["compute_devices"] = max(1, len(devs))
    facts["compute_scope"] = "process"
    facts["compute_devices_how"] = f"one process on {', '.join(devs) or 'cpu'}"
    if facts.get("backend") == "cuda":
        # Ranks sharing a GPU (a missing set_device) must count once: the GPUs' own ids. A
        # torch without them: the count stands, one per rank.
        with contextlib.suppress(Exception):
            facts["compute_device_ids"] = sorted({
                str(torch.cuda.get_device_properties(torch.device(d).index or 0).uuid)
                for d in devs if torch.device(d).type == "cuda"})


def _is_spmd(xla: dict[str, Any]) -> bool:
    try:
        return bool(xla["xr"].is_spmd())
    except Exception:
        return False


def _compute_spmd(xla: dict[str, Any], facts: dict[str, Any], params: list[Any],
                  shardings: set[str] | None) -> None:
    spec = xla["torch_xla"]._XLAC._get_xla_sharding_spec
    specs = {spec(p) for p in params} | (shardings or set())
    specs.discard("")
    # Without the loss's graph (none was read at the first backward) only the parameters'.
    seen = "the step's inputs and parameters" if shardings else "the parameters"
    n, named = distinct_work(sorted(specs))
    try:
        mesh = int(xla["xr"].global_runtime_device_count())
    except Exception:
        mesh = named
    facts["compute_devices"] = n
    facts["compute_scope"] = "mesh"
    facts["compute_shardings"] = sorted(s for s in specs if sharding_pieces(s))[:MAX_SHARDINGS]
    facts["compute_devices_how"] = (
        f"spmd: {seen} split {n} ways over a {mesh}-device mesh" if n > 1 else
        f"spmd: none of {seen} sharded over the {mesh}-device mesh, so each device computes "
        "the whole step")


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
