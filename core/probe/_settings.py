"""The settings a run trained with, for the probe's `facts`: every optimizer's class and
hyper-parameters per param group, the training DataLoader's pipeline, the training precision.

Loaded by path by ``_probe.py`` (stdlib at import; torch only through the objects it is
given), never imports portside. Each function runs once per optimizer, per training
iterator or per new autocast mode; `WATCH.poll` every WATCH_EVERY steps of _probe.py (a few
dict reads per param group): nothing here is per-step work. Format: FORMAT.md ("settings in `facts`").
"""

from __future__ import annotations

import hashlib
import os
import sys
import weakref
from typing import Any

# Param-group keys that are not the optimizer's settings: the lr has its own schedule check
# (and schedulers write these), the others choose an implementation, not the arithmetic.
SKIP_KEYS = frozenset({
    "params", "lr", "initial_lr", "max_lr", "min_lr", "base_lr", "base_momentum",
    "max_momentum", "foreach", "fused", "capturable", "differentiable", "name",
})
# Environment switches that change the precision torch_xla computes in.
PRECISION_ENV = ("XLA_USE_BF16", "XLA_DOWNCAST_BF16", "XLA_USE_FP16", "XLA_USE_32BIT_LONG")
MAX_SCAN = 400  # frame variables looked at when naming an optimizer's owner
MAX_CHANGES = 20  # per optimizer: a setting the script moves every step is not a list of all


def value(v: Any) -> Any:
    """A JSON-ready setting: tuples as lists, 0-d tensors as numbers, other objects named."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [value(x) for x in v]
    item = getattr(v, "item", None)
    numel = getattr(v, "numel", None)
    if callable(item) and callable(numel):
        try:
            if numel() == 1 and getattr(v, "device", None) is not None \
                    and v.device.type == "cpu":
                return item()
        except Exception:
            pass
        return f"<tensor {tuple(getattr(v, 'shape', ()))}>"
    return f"<{type(v).__name__}>"


def param_signature(params: list[Any]) -> str:
    """What the parameters are, not where: the sorted shapes (hashed), so one optimizer is
    matched across runs by what it trains (a GAN's two optimizers), not by creation order."""
    shapes = sorted(",".join(str(int(d)) for d in p.shape) for p in params)
    return hashlib.sha256(";".join(shapes).encode()).hexdigest()[:12]


def _user_frame() -> Any:
    """The innermost frame outside torch and the probe: the training script's; past installed
    libraries too (accelerate, Lightning, the HF Trainer step the optimizer from their own
    frames), unless the script is itself installed (then the innermost such frame)."""
    f = sys._getframe(1)
    here = os.path.dirname(os.path.abspath(__file__))
    first = None
    while f is not None:
        name = f.f_code.co_filename
        if not (name.startswith(here) or f"{os.sep}torch{os.sep}" in name
                or f"{os.sep}torch_xla{os.sep}" in name or name.startswith("<frozen")):
            if f"{os.sep}site-packages{os.sep}" not in name and \
                    f"{os.sep}dist-packages{os.sep}" not in name:
                return f
            first = first or f
        f = f.f_back
    return first


def _wraps(obj: Any, opt: Any) -> str | None:
    """"" when obj is a library's wrapper of opt (accelerate's AcceleratedOptimizer keeps it
    as `.optimizer`), ".optimizer" when obj holds such a wrapper (the HF Trainer); else None."""
    try:
        inner = getattr(obj, "optimizer", None)
        if inner is opt:
            return ""
        if inner is not None and getattr(inner, "optimizer", None) is opt:
            return ".optimizer"
    except Exception:
        pass
    return None


def owner_names(opt: Any, torch: Any) -> tuple[str | None, dict[int, str]]:
    """The script's variable names for this optimizer and for the modules owning its
    parameters (id of the parameter → module name), read from the stepping frame once."""
    f = _user_frame()
    if f is None:
        return None, {}
    ids = {id(p) for g in opt.param_groups for p in g["params"]}
    opt_name: str | None = None
    wrapper_name: str | None = None  # a variable holding a library's wrapper of it
    owners: dict[int, str] = {}
    module_cls = torch.nn.Module
    scanned = 0
    for scope in (f.f_locals, f.f_globals):
        for name, obj in list(scope.items()):
            scanned += 1
            if scanned > MAX_SCAN:
                break
            if name.startswith("_"):
                continue
            if obj is opt and opt_name is None:
                opt_name = name
            elif isinstance(obj, module_cls):
                try:
                    for p in obj.parameters():
                        if id(p) in ids:
                            owners.setdefault(id(p), name)
                except Exception:
                    continue
            elif wrapper_name is None and (via := _wraps(obj, opt)) is not None:
                wrapper_name = name + via
    return opt_name or wrapper_name, owners


def optimizer_facts(opt: Any, index: int, torch: Any) -> dict[str, Any]:
    """One optimizer: class, every param group's settings, what it trains."""
    params = [p for g in opt.param_groups for p in g["params"]]
    name, owners = owner_names(opt, torch)
    groups = []
    for g in opt.param_groups:
        ps = list(g["params"])
        mods = sorted({owners[id(p)] for p in ps if id(p) in owners})
        groups.append({
            "settings": {k: value(v) for k, v in sorted(g.items()) if k not in SKIP_KEYS},
            "params": len(ps), "numel": int(sum(p.numel() for p in ps)),
            "modules": mods,
        })
    mods = sorted({m for g in groups for m in g["modules"]})
    WATCH.add(opt, index)
    return {"index": index, "class": type(opt).__name__, "name": name, "modules": mods,
            "params": len(params), "numel": int(sum(p.numel() for p in params)),
            "signature": param_signature(params), "groups": groups}


def data_facts(it: Any) -> dict[str, Any] | None:
    """The DataLoader iterator that fed the training steps: batch size, order, drop_last,
    workers, dataset (read from the iterator: the loader itself is not kept by it)."""
    if it is None:
        return None
    cpu = getattr(getattr(it, "_loader", None), "_cpu_loader", None)
    if cpu is not None and not hasattr(it, "_index_sampler"):
        return _loader_facts(cpu)  # torch_xla's per-device iterator: the DataLoader it reads
    read = getattr(it, "_portside_loader", None)
    if read is not None:
        return _loader_facts(read)  # a library loader's handed-over batches (the probe's)
    index = getattr(it, "_index_sampler", None)
    return _sampling_facts(index, getattr(it, "_dataset", None),
                           getattr(it, "_drop_last", getattr(index, "drop_last", None)),
                           getattr(it, "_num_workers", None), getattr(it, "_pin_memory", None))


def _loader_facts(loader: Any) -> dict[str, Any] | None:
    """data_facts of a DataLoader itself (its iterator runs in another thread)."""
    index = getattr(loader, "_index_sampler", None)
    if index is None:
        return None
    return _sampling_facts(index, getattr(loader, "dataset", None),
                           getattr(loader, "drop_last", getattr(index, "drop_last", None)),
                           getattr(loader, "num_workers", None),
                           getattr(loader, "pin_memory", None))


def _sampling_facts(index: Any, ds: Any, drop_last: Any, workers: Any,
                    pinned: Any) -> dict[str, Any]:
    """The facts of a loader's batch sampler and dataset, from a DataLoader or its iterator
    (they name the same things differently)."""
    sampler = getattr(index, "sampler", index)
    sname = type(sampler).__name__ if sampler is not None else None
    shuffle = getattr(sampler, "shuffle", None)  # DistributedSampler
    if shuffle is None and sname is not None:
        shuffle = {"RandomSampler": True, "SubsetRandomSampler": True,
                   "WeightedRandomSampler": True, "SequentialSampler": False}.get(sname)
    try:
        ds_len = len(ds) if ds is not None else None
    except Exception:
        ds_len = None
    return {
        "batch_size": getattr(index, "batch_size", None),
        "shuffle": shuffle,
        "sampler": sname,
        "batch_sampler": type(index).__name__ if index is not sampler else None,
        "drop_last": drop_last,
        "num_workers": workers,
        "pin_memory": pinned,
        "dataset": type(ds).__name__ if ds is not None else None,
        "dataset_len": ds_len,
    }


def precision_facts(torch: Any, param_dtypes: list[str], modes: set[tuple[str, str]],
                    scaler: bool) -> dict[str, Any]:
    """The training precision: parameter dtypes, autocast modes entered (device, dtype),
    the default dtype, float32 matmul precision, torch_xla's precision switches, GradScaler."""
    import warnings

    try:
        with warnings.catch_warnings():  # torch 2.9 warns about its TF32 API: not the user's
            warnings.simplefilter("ignore")
            matmul = torch.get_float32_matmul_precision()
    except Exception:
        matmul = None
    return {
        "param_dtypes": sorted(param_dtypes),
        "autocast": sorted(f"{d}:{t}" for d, t in modes),
        "default_dtype": str(torch.get_default_dtype()),
        "matmul_precision": matmul,
        "env": {k: os.environ[k] for k in PRECISION_ENV if k in os.environ},
        "grad_scaler": scaler,
    }


def wrap_autocast(torch: Any, seen: Any, mark: str) -> None:
    """Record each enabled autocast mode as it is entered: `seen(device, dtype)` is called with
    every enabled entry (a set lookup there; the modes are few). Forward passes run inside
    autocast and backward outside it, so the step itself cannot tell."""
    cls = torch.amp.autocast_mode.autocast
    enter = cls.__enter__
    if getattr(enter, mark, False):
        return

    def __enter__(self: Any) -> Any:
        out = enter(self)
        try:
            if getattr(self, "_enabled", False):
                seen(str(getattr(self, "device", "?")), str(getattr(self, "fast_dtype", "?")))
        except Exception:
            pass
        return out

    __enter__.__wrapped__ = enter  # type: ignore[attr-defined]
    setattr(__enter__, mark, True)
    cls.__enter__ = __enter__


def _groups(opt: Any) -> list[dict[str, Any]]:
    return [{k: value(v) for k, v in g.items() if k not in SKIP_KEYS} for g in opt.param_groups]


class Watch:
    """The settings of every optimizer seen, re-read by `poll`: a change made during the run
    (momentum set at step N, weight decay turned on) is appended to that optimizer's facts as
    {"step", "since", "group", "setting", "from", "to"}: seen at `step`, made after `since`
    (the previous read)."""

    def __init__(self) -> None:
        self.opts: list[tuple[Any, int, list[dict[str, Any]]]] = []
        self.last = -1

    def add(self, opt: Any, index: int) -> None:
        self.opts.append((weakref.ref(opt), index, _groups(opt)))

    def poll(self, step: int, opt_facts: list[dict[str, Any]]) -> bool:
        """Re-read them at `step`; True when a change went into `opt_facts` (in place)."""
        since, self.last = self.last, step
        changed = False
        for i, (ref, index, old) in enumerate(self.opts):
            opt = ref()
            if opt is None or index >= len(opt_facts):
                continue
            new = _groups(opt)
            if new == old:
                continue
            self.opts[i] = (ref, index, new)
            found = [{"step": step, "since": since, "group": None, "setting": "param groups",
                      "from": len(old), "to": len(new)}] if len(new) != len(old) else [
                {"step": step, "since": since, "group": g, "setting": k, "from": a.get(k),
                 "to": b.get(k)}
                for g, (a, b) in enumerate(zip(old, new, strict=True))
                for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)]
            facts = opt_facts[index]
            kept = facts.get("changes", [])
            opt_facts[index] = dict(facts, changes=(kept + found)[:MAX_CHANGES])
            changed = True
        return changed


WATCH = Watch()
