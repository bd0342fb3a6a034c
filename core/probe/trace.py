"""Trace mode: compact statistics of the first K optimizer steps, in call order.

Runs inside the user's training process like ``_probe.py`` (stdlib at import, torch once the
program imports it, never the rest of portside); loaded by ``inject/sitecustomize.py`` only when
``PORTSIDE_TRACE_OUT`` is set, so with trace mode off nothing here is even imported. Records and
environment variables: the "Trace mode" section of FORMAT.md. ``core/localize/traces.py`` compares two
traces and names the first place where they part.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.abc
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

VERSION = 1
MAX_LEAVES = 16  # tensors recorded per module output (a tuple, a dict of outputs)
_MARK = "__portside_trace__"
_PREFIXES = ("module.", "_orig_mod.", "model.")  # DDP, torch.compile, wrapper models

_tracer: Tracer | None = None


def _warn(msg: str) -> None:
    with contextlib.suppress(Exception):
        sys.stderr.write(f"portside trace: {msg}\n")


def _num(x: float) -> float | str:
    if x != x:
        return "nan"
    if x in (float("inf"), float("-inf")):
        return "inf" if x > 0 else "-inf"
    return x


class _HookedLoader(importlib.abc.Loader):
    def __init__(self, loader: Any, hook: Callable[[ModuleType], None]) -> None:
        self._loader, self._hook = loader, hook

    def create_module(self, spec: Any) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        try:
            self._hook(module)
        except Exception as e:  # never break the user's import
            _warn(f"disabled ({type(e).__name__}: {e})")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class _AfterTorch(importlib.abc.MetaPathFinder):
    """Runs a hook right after ``torch`` finished importing; finds nothing itself."""

    def __init__(self, hook: Callable[[ModuleType], None]) -> None:
        self.hook = hook
        self.busy = False

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "torch" or self.busy:
            return None
        self.busy = True
        try:
            spec = None
            for finder in sys.meta_path:  # the probe's own finder included: it wraps too
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
        finally:
            self.busy = False
        if spec is None or spec.loader is None:
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)
        spec.loader = _HookedLoader(spec.loader, self.hook)
        return spec


def _leaves(x: Any, torch: Any, path: str = "", depth: int = 0) -> Iterator[tuple[str, Any]]:
    if isinstance(x, torch.Tensor):
        yield path, x
    elif depth < 3 and isinstance(x, (list, tuple)):
        for i, v in enumerate(x):
            yield from _leaves(v, torch, f"{path}.{i}" if path else str(i), depth + 1)
    elif depth < 3 and isinstance(x, dict):
        for k, v in x.items():
            yield from _leaves(v, torch, f"{path}.{k}" if path else str(k), depth + 1)


class _Root:
    """A model: a module called outermost that has parameters. Names come from it."""

    def __init__(self, module: Any, index: int, prefix: str) -> None:
        self.module = module
        self.index = index
        self.prefix = prefix
        self.names: dict[int, str] = {}
        self.refresh()

    def refresh(self) -> None:
        self.names = {id(m): n for n, m in self.module.named_modules()}

    def name_of(self, m: Any) -> str:
        n = self.names.get(id(m))
        if n is None:
            self.refresh()  # a module created after the first call
            n = self.names.get(id(m))
        if n is None:
            n = f"<{type(m).__name__}>"
        return self.prefix + n


class Tracer:
    def __init__(self, out: str) -> None:
        self.out = out
        try:
            self.k = max(1, int(os.environ.get("PORTSIDE_TRACE_STEPS") or 2))
        except ValueError:
            self.k = 2
        self.exit_after = os.environ.get("PORTSIDE_TRACE_EXIT", "1") not in ("0", "")
        self.init_in = os.environ.get("PORTSIDE_TRACE_INIT") or None
        self.init_out = os.environ.get("PORTSIDE_TRACE_SAVE_INIT") or None
        seed = os.environ.get("PORTSIDE_TRACE_SEED")
        self.seed = int(seed) if seed and seed.lstrip("-").isdigit() else None
        self.torch: Any = None
        self.tls = threading.local()
        self.lock = threading.RLock()
        self.handles: list[Any] = []
        self.on = True
        self.pid = os.getpid()
        self.fd: int | None = None
        self.step = 0
        self.events: list[dict[str, Any]] = []  # this step's records, values still tensors
        self.roots: list[_Root] = []
        self.root_of: dict[int, _Root | None] = {}  # id(module) -> its root (None: not a model)
        self.param_names: dict[int, str] = {}
        self.opt_params: dict[int, Any] = {}  # id -> param, of every optimizer that stepped
        self.pending_grads: dict[int, Any] = {}  # id(param) -> stats after the last backward
        self.before: list[tuple[str, Any, Any]] = []
        self.calls: dict[tuple[str, str, str], int] = {}
        self.weights: list[dict[str, Any]] = []  # alignment reports, written with step 0
        self.header: dict[str, Any] = {}
        self._w: dict[tuple[int, str], Any] = {}

    # ------------------------------------------------------------ install

    def install(self) -> None:
        if "torch" in sys.modules:
            self._on_torch(sys.modules["torch"])
        else:
            sys.meta_path.insert(0, _AfterTorch(self._on_torch))
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        # A DataLoader worker or other forked child: it does not train; the parent traces.
        self.on = False
        self.events, self.before, self.pending_grads = [], [], {}

    def _on_torch(self, torch: Any) -> None:
        self.torch = torch
        import torch.nn.modules.module as module
        import torch.optim.optimizer as optimizer

        if self.seed is not None:  # same start on both sides; the program's own seeding wins
            import random

            torch.manual_seed(self.seed)
            random.seed(self.seed)
        self.handles = [
            module.register_module_forward_pre_hook(self._pre_forward),
            module.register_module_forward_hook(
                self._post_forward, with_kwargs=True, always_call=True
            ),
            optimizer.register_optimizer_step_pre_hook(self._pre_step),
            optimizer.register_optimizer_step_post_hook(self._post_step),
        ]
        self._wrap_backward(torch)
        import atexit

        atexit.register(self._at_exit)

    def _stop(self) -> None:
        self.on = False
        for h in self.handles:
            with contextlib.suppress(Exception):
                h.remove()
        self.handles = []

    def _wrap_backward(self, torch: Any) -> None:
        import functools

        tr = self
        tensor_backward = torch.Tensor.backward
        autograd_backward = torch.autograd.backward

        def around(t: Any, call: Callable[[], Any]) -> Any:
            if getattr(tr.tls, "bw", False) or not tr.on:
                return call()
            tr.tls.bw = True
            try:
                if isinstance(t, (list, tuple)) and len(t) == 1:
                    t = t[0]
                if isinstance(t, torch.Tensor) and t.numel() == 1:
                    tr._guard(tr._on_loss, t)
                result = call()
            finally:
                tr.tls.bw = False
            tr._guard(tr._snapshot_grads)
            return result

        @functools.wraps(tensor_backward)
        def backward(self: Any, gradient: Any = None, *args: Any, **kwargs: Any) -> Any:
            t = self if gradient is None else None
            return around(t, lambda: tensor_backward(self, gradient, *args, **kwargs))

        @functools.wraps(autograd_backward)
        def autograd_bw(tensors: Any, grad_tensors: Any = None, *args: Any, **kwargs: Any) -> Any:
            t = tensors if grad_tensors is None else None
            return around(t, lambda: autograd_backward(tensors, grad_tensors, *args, **kwargs))

        setattr(backward, _MARK, True)
        setattr(autograd_bw, _MARK, True)
        if not getattr(tensor_backward, _MARK, False):
            torch.Tensor.backward = backward
        if not getattr(autograd_backward, _MARK, False):
            torch.autograd.backward = autograd_bw

    def _guard(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as e:  # the trace must never break training: it stops instead
            _warn(f"stopped ({type(e).__name__}: {e})")
            self._stop()
            return None

    # ------------------------------------------------------------ statistics

    def _stats(self, t: Any) -> Any:
        """[norm, mean, abs-max, projection] as one float32 tensor on t's device (lazy on XLA)."""
        torch = self.torch
        x = t.detach()
        if x.is_complex():
            x = torch.view_as_real(x)
        x = x.reshape(-1).to(torch.float32)
        n = x.numel()
        if n == 0:
            return None
        # A fixed integer pattern, exact on every backend: catches permutations and sign flips
        # that keep the norm.
        key = (n, str(x.device))
        w = self._w.get(key)
        if w is None:
            i = torch.arange(n, device=x.device, dtype=torch.int64)
            w = ((i * 7919) % 101 - 50).to(torch.float32) / 50.0
            if len(self._w) < 64 and n <= 1 << 20:
                self._w[key] = w
        return torch.stack(
            [torch.linalg.vector_norm(x), x.mean(), x.abs().max(), (x * w).sum() / (n**0.5)]
        )

    def _event(
        self, kind: str, name: str, t: Any, out: str = "", base: Any = None, **extra: Any
    ) -> None:
        s = self._stats(t)
        if base is not None and s is not None:
            # The norm of what the update was added to: a difference of two close numbers is
            # only as exact as that magnitude allows (the compare's tolerance needs it).
            s = self.torch.cat([s, torch_norm(self.torch, base).reshape(1)])
        key = (kind, name, out)
        call = self.calls.get(key, 0)
        self.calls[key] = call + 1
        rec = {"type": kind, "step": self.step, "name": name, "call": call, "out": out,
               "shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""), **extra}
        rec["_s"] = s
        self.events.append(rec)

    # ------------------------------------------------------------ model roots and weights

    def _root(self, module: Any) -> _Root | None:
        key = id(module)
        if key in self.root_of:
            return self.root_of[key]
        root: _Root | None = None
        for r in self.roots:  # a submodule of a known model, called on its own
            if key in r.names:
                root = _Root(module, r.index, r.name_of(module) + ".")
                break
        if root is None and next(iter(module.parameters()), None) is not None:
            i = len(self.roots)
            root = _Root(module, i, "" if i == 0 else f"@{i}.")
            self.roots.append(root)
            for n, p in module.named_parameters():
                self.param_names.setdefault(id(p), root.prefix + n)
            self._init_weights(root)
        self.root_of[key] = root
        return root

    def _state(self, module: Any) -> list[tuple[str, Any]]:
        return [*module.named_parameters(), *module.named_buffers()]

    def _init_weights(self, root: _Root) -> None:
        """Save or load the initial parameters (before the model's first forward)."""
        torch = self.torch
        state = self._state(root.module)
        report: dict[str, Any] = {"type": "weights", "step": 0, "root": root.index,
                                  "params": len(state), "checksum": _checksum(torch, state)}
        if self.init_out and root.index == 0 and not os.path.exists(self.init_out):
            tmp = f"{self.init_out}.{os.getpid()}.tmp"
            torch.save({n: t.detach().to("cpu").clone() for n, t in state}, tmp)
            os.replace(tmp, self.init_out)
            report["saved"] = self.init_out
        if self.init_in and root.index == 0:
            report.update(self._load(root, state))
            report["checksum_aligned"] = _checksum(torch, self._state(root.module))
        self.weights.append(report)
        for n, t in self._state(root.module):
            self._event("param", root.prefix + n, t)

    def _load(self, root: _Root, state: list[tuple[str, Any]]) -> dict[str, Any]:
        torch = self.torch
        try:
            ref = torch.load(self.init_in, map_location="cpu", weights_only=True)
        except Exception as e:
            return {"aligned": False, "error": f"cannot read {self.init_in}: {e}"}
        mine = dict(state)
        match, how = _match(list(mine), list(ref), {n: tuple(t.shape) for n, t in state},
                            {n: tuple(t.shape) for n, t in ref.items()})
        differed, loaded, shape = [], [], []
        with torch.no_grad():
            for n, rn in match.items():
                dst, src = mine[n], ref[rn]
                if tuple(dst.shape) != tuple(src.shape):
                    shape.append(n)
                    continue
                own = dst.detach().to("cpu")
                if own.dtype != src.dtype or not torch.equal(own, src):
                    differed.append(n)
                    dst.copy_(src.to(dtype=dst.dtype))
                loaded.append(n)
        return {
            "aligned": bool(loaded) and not shape and len(loaded) == len(mine),
            "matched_by": how,
            "loaded": len(loaded),
            "differed": differed,
            "shape_mismatch": shape,
            "missing": [n for n in mine if n not in match],
            "unexpected": sorted(set(ref) - set(match.values())),
        }

    # ------------------------------------------------------------ hooks

    def _pre_forward(self, module: Any, args: Any) -> None:
        if not self.on:
            return
        stack = getattr(self.tls, "stack", None)
        if stack is None:
            stack = self.tls.stack = []
        if stack:
            stack.append((module, stack[0][1], None))
            return
        root = self._guard(self._root, module)
        pos = len(self.events)
        stack.append((module, root, pos))
        if root is not None:
            for path, t in _leaves(args, self.torch):
                self._guard(self._event, "input", root.prefix + "args", t, path)

    def _post_forward(self, module: Any, args: Any, *rest: Any) -> None:
        # (kwargs, output); torch's exception path calls global always_call hooks without kwargs
        kwargs, output = rest if len(rest) == 2 else ({}, rest[-1])
        stack = getattr(self.tls, "stack", None)
        if not stack:
            return
        entry = stack.pop()
        if entry[0] is not module:  # unbalanced (an exception skipped a hook): start over
            stack.clear()
            return
        root, pos = entry[1], entry[2]
        if root is None or not self.on:
            return
        if pos is not None and kwargs:
            events, self.events = self.events, []
            for path, t in _leaves(kwargs, self.torch):
                self._guard(self._event, "input", root.prefix + "kwargs", t, path)
            self.events = events[:pos] + self.events + events[pos:]
        name = root.name_of(module) if pos is None else root.prefix.rstrip(".")
        cls = type(module).__name__
        for i, (path, t) in enumerate(_leaves(output, self.torch)):
            if i >= MAX_LEAVES:
                break
            self._guard(self._event, "module", name, t, path, cls=cls)

    def _on_loss(self, t: Any) -> None:
        loss = getattr(t, "_portside_unscaled", t)  # the probe marks GradScaler's scaled loss
        self._event("loss", "loss", loss)

    def _tracked(self) -> list[tuple[str, Any]]:
        seen: dict[int, tuple[str, Any]] = {}
        for r in self.roots:
            for n, p in r.module.named_parameters():
                seen.setdefault(id(p), (r.prefix + n, p))
        for key, p in self.opt_params.items():
            seen.setdefault(key, (self.param_names.get(key, "?"), p))
        return list(seen.values())

    def _snapshot_grads(self) -> None:
        if not self.on:
            return
        self.pending_grads = {
            id(p): (p.grad, self._stats(p.grad))
            for _, p in self._tracked()
            if p.grad is not None and not p.grad.is_sparse
        }

    def _names(self, opt: Any) -> list[tuple[str, Any]]:
        out = []
        for gi, g in enumerate(opt.param_groups):
            for i, p in enumerate(g["params"]):
                name = self.param_names.get(id(p))
                if name is None:
                    name = self.param_names[id(p)] = f"<opt.group{gi}.{i}>"
                self.opt_params.setdefault(id(p), p)
                out.append((name, p))
        return out

    def _pre_step(self, opt: Any, args: Any, kwargs: Any) -> None:
        if self.on:
            self._guard(self._before_step, opt)

    def _before_step(self, opt: Any) -> None:
        params = self._names(opt)
        for name, p in params:
            got = self.pending_grads.get(id(p))
            if got is not None:
                self._add(got[1], "grad", name, got[0])
        for name, p in params:
            if p.grad is not None and not p.grad.is_sparse:
                self._event("clipped", name, p.grad)
        self.pending_grads = {}
        self.before = [(name, p, p.detach().clone()) for name, p in params]

    def _add(self, stats: Any, kind: str, name: str, t: Any) -> None:
        """An event whose statistics were taken earlier (the gradient right after backward)."""
        self._event(kind, name, t)
        self.events[-1]["_s"] = stats

    def _post_step(self, opt: Any, args: Any, kwargs: Any) -> None:
        if self.on:
            self._guard(self._after_step)

    def _after_step(self) -> None:
        for name, p, b in self.before:
            self._event("update", name, p.detach() - b, base=b)
        self.before = []
        batch, self.events = self.events, []
        self.step += 1
        self.calls = {}
        done = self.step >= self.k
        if done:
            self._stop()
        xm = sys.modules.get("torch_xla.core.xla_model")
        if xm is not None and any(_on_xla(r.get("_s")) for r in batch):
            # One graph output for the step's statistics instead of one per event: XLA's compile
            # time grows with the outputs.
            live = [r for r in batch if _on_xla(r.get("_s"))]
            packed = self.torch.cat([r["_s"] for r in live])
            i = 0
            for r in live:
                n = r["_s"].numel()
                r["_s"] = _Slice(packed, i, n)
                i += n
            # After the step's graph ran: the values are read, nothing more is compiled.
            xm.add_step_closure(self._write_step, args=(batch, done, "steps", True))
        else:
            self._write_step(batch, done)

    # ------------------------------------------------------------ writing

    def _claim(self) -> bool:
        """The first process of the tree that steps writes the trace; others stop."""
        if self.fd is not None:
            return True
        try:
            d = os.path.dirname(self.out)
            if d:
                os.makedirs(d, exist_ok=True)
            self.fd = os.open(self.out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            self._stop()
            return False
        device = None
        if self.roots:
            p = next(iter(self.roots[0].module.parameters()), None)
            device = str(p.device) if p is not None else None
        self.header = {"type": "trace", "version": VERSION, "t": time.time(), "pid": self.pid,
                       "argv": list(sys.argv), "steps": self.k, "seed": self.seed,
                       "torch": str(self.torch.__version__), "device": device,
                       "torch_xla": getattr(sys.modules.get("torch_xla"), "__version__", None)}
        self._write([self.header, *self.weights])
        return True

    def _write_step(
        self, batch: list[dict[str, Any]], done: bool, reason: str = "steps", closure: bool = False
    ) -> None:
        with self.lock:
            try:
                if os.getpid() != self.pid or not self._claim():
                    return
                self._resolve(batch)
                recs = batch
                if done:
                    recs = [*batch, {"type": "trace_end", "steps": self.step, "reason": reason}]
                self._write(recs)
            except Exception as e:
                _warn(f"write failed ({type(e).__name__}: {e})")
                return
        if done and self.exit_after and reason == "steps":
            if not closure:
                self._exit_now()
            # Inside torch_xla's sync: end at the program's next model call or step instead.
            import torch.nn.modules.module as module
            import torch.optim.optimizer as optimizer

            self.handles = [
                module.register_module_forward_pre_hook(lambda *a: self._exit_now()),
                optimizer.register_optimizer_step_pre_hook(lambda *a: self._exit_now()),
            ]

    def _exit_now(self) -> None:
        """The traced steps are all a comparison needs: end here, not after a full run. The
        exit handlers run (the probe writes its records), then the process exits with 0."""
        import atexit

        for f in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                f.flush()
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()
        os._exit(0)

    def _resolve(self, batch: list[dict[str, Any]]) -> None:
        torch = self.torch
        tensors = [r["_s"] for r in batch if r.get("_s") is not None]
        got: dict[int, list[float]] = {}
        slices = [t for t in tensors if isinstance(t, _Slice)]
        packed = list({id(t.packed): t.packed for t in slices}.values())
        if packed:
            cpu = sys.modules["torch_xla"]._XLAC._xla_get_cpu_tensors(packed)  # a copy, no compile
            flat = {id(t): c.tolist() for t, c in zip(packed, cpu, strict=True)}
            for t in slices:
                got[id(t)] = flat[id(t.packed)][t.start : t.start + t.n]
        rest = [t for t in tensors if not isinstance(t, _Slice)]
        if rest:
            flat = torch.cat([t.to("cpu") for t in rest]).tolist()  # one sync on async devices
            i = 0
            for t in rest:
                got[id(t)] = flat[i : i + t.numel()]
                i += t.numel()
        for r in batch:
            s = r.pop("_s", None)
            if s is not None:
                v = got[id(s)]
                r.update(norm=_num(v[0]), mean=_num(v[1]), absmax=_num(v[2]), proj=_num(v[3]))
                if len(v) > 4:
                    r["base"] = _num(v[4])

    def _write(self, recs: list[dict[str, Any]]) -> None:
        import json

        assert self.fd is not None
        data = "".join(json.dumps(r, allow_nan=False, default=str) + "\n" for r in recs).encode()
        while data:
            data = data[os.write(self.fd, data):]

    def _at_exit(self) -> None:
        # The program ended (or crashed) before K steps: what was recorded still localises.
        if os.getpid() != self.pid or self.step >= self.k:
            return
        if self.events or self.roots:
            self._stop()
            self._write_step(self.events, True, reason="exit")


class _Slice:
    """Where an event's statistics sit in its step's packed tensor (torch_xla)."""

    __slots__ = ("packed", "start", "n")

    def __init__(self, packed: Any, start: int, n: int) -> None:
        self.packed, self.start, self.n = packed, start, n


def torch_norm(torch: Any, t: Any) -> Any:
    return torch.linalg.vector_norm(t.detach().reshape(-1).to(torch.float32))


def _on_xla(t: Any) -> bool:
    return t is not None and getattr(getattr(t, "device", None), "type", None) == "xla"


def _checksum(torch: Any, state: list[tuple[str, Any]]) -> str:
    """sha256 of names and float32 values on the host: equal weights hash equal anywhere."""
    h = hashlib.sha256()
    for n, t in state:
        h.update(n.encode())
        c = t.detach().to("cpu").to(torch.float32).contiguous().clone()
        h.update(bytes(c.untyped_storage()))
    return h.hexdigest()[:16]


def _strip(name: str) -> str:
    changed = True
    while changed:
        changed = False
        for p in _PREFIXES:
            if name.startswith(p):
                name, changed = name[len(p):], True
    return name


def _match(
    mine: list[str], ref: list[str], mine_shapes: dict[str, tuple[int, ...]],
    ref_shapes: dict[str, tuple[int, ...]],
) -> tuple[dict[str, str], str]:
    """Candidate name -> reference name: by name, else by name without wrapper prefixes, else
    by order when both lists have the same shapes in the same order."""
    by_name = {n: n for n in mine if n in ref_shapes}
    if by_name:
        return by_name, "name"
    stripped = {_strip(n): n for n in ref}
    by_strip = {n: stripped[_strip(n)] for n in mine if _strip(n) in stripped}
    if by_strip:
        return by_strip, "name without wrapper prefixes"
    if [mine_shapes[n] for n in mine] == [ref_shapes[n] for n in ref]:
        return dict(zip(mine, ref, strict=True)), "order"
    return {}, "nothing"


def activate() -> Tracer | None:
    """Start trace mode in this process when PORTSIDE_TRACE_OUT is set; idempotent."""
    global _tracer
    if _tracer is not None:
        return _tracer
    out = os.environ.get("PORTSIDE_TRACE_OUT")
    if not out:
        return None
    _tracer = Tracer(os.path.abspath(out))
    _tracer.install()
    return _tracer
