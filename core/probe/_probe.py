"""The portside probe: runs inside the user's training process.

Standard library at import time; torch (and torch_xla / torch.tpu when the program uses them)
only after the program itself imported torch. Never imports the rest of portside: this file is
loaded by path from ``inject/sitecustomize.py`` in whatever Python env the user trains in.
The record format is documented in FORMAT.md next to this file. Its collaborators sit beside
it and are loaded the same way (`_sibling`): the record writer (_writer.py), the step values
(_values.py), the facts (_facts.py), the torch_xla bookkeeping (_xla.py) and the run's
settings (_settings.py).
"""

from __future__ import annotations

import contextlib
import importlib.abc
import math
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from types import ModuleType
from typing import Any

# A write a flush: one packed line of its steps, sealed, and one system call. At a 1 ms step,
# 100 steps are 0.1 s; slower runs are flushed each second.
FLUSH_EVERY_STEPS = 100
FLUSH_EVERY_S = 1.0
NORM_BUDGET = 0.003  # share of the step time the probe's own grad norm may take on CPU
NORM_MAX_STRIDE = 50
# Backward passes become steps only after this many with no optimizer step in between: a
# gradient-accumulation loop runs several backward passes before its first optimizer step.
BW_CONFIRM = 16
PARAM_SUM_EVERY = 10  # multi-process runs: a parameter checksum every N steps (ranks compared)
# Steps between re-reads of the optimizers' settings (_settings.py Watch): a change made by
# hand mid-run is seen within this many steps, for a few dict reads per param group.
WATCH_EVERY = 20
# The batch a step consumed (the leading dimension of its loss's input, `consumed`) is read on
# this many first steps only: the batch is configuration, and no step after pays for it.
CONSUMED_STEPS = 16
OWN_WINDOW = FLUSH_EVERY_STEPS  # steps per sample of the probe's own time (one flush each)
OWN_RING = 256  # samples the exit record's median is taken over
# At exit, how long to wait for the background writer; on a signal less (the runner kills 1 s
# after SIGTERM).
DRAIN_WAIT_S = 5.0
DRAIN_WAIT_SIGNAL_S = 0.5
_MARK = "__portside_probe__"  # set on every function object the probe wraps

# A step's values as `_record` takes them (fields: `_as_dict`): a tuple costs a fraction of
# the record's dict between torch's kernels.
_Row = tuple[Any, ...]

_probe: Probe | None = None
_warned: set[str] = set()


def _warn(msg: str) -> None:
    """To stderr, once per message: a hook that fails fails at every step."""
    if msg in _warned or len(_warned) > 20:
        return
    _warned.add(msg)
    with contextlib.suppress(Exception):
        sys.stderr.write(f"portside probe: {msg}\n")


def _sibling(name: str) -> ModuleType:
    """The module `name`.py beside this file, loaded by path as this file is (no package,
    nothing added to sys.path), as `<this module's name><name>`: two copies of the probe
    loaded under two names (a benchmark's A/B) keep their own collaborators."""
    import importlib.util

    full = f"{__name__}{name}"
    mod = sys.modules.get(full)
    if mod is not None:
        return mod
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(full, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[full] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        del sys.modules[full]
        raise
    return mod


_writer = _sibling("_writer")
_values = _sibling("_values")
_facts = _sibling("_facts")
_xla = _sibling("_xla")
_packed = _sibling("_packed")


# ---------------------------------------------------------------- lazy post-import hooks


class _HookedLoader(importlib.abc.Loader):
    """Runs the real loader, then a hook with the fully initialised module."""

    def __init__(self, loader: Any, hook: Callable[[ModuleType], None]) -> None:
        self._loader = loader
        self._hook = hook

    def create_module(self, spec: Any) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        # Put the real loader back first so the module's own introspection sees it.
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        try:
            self._hook(module)
        except Exception as e:  # the probe must never break the user's import
            _warn(f"hook for {module.__name__} failed: {type(e).__name__}: {e}")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Meta-path finder that wraps the loader of a few named modules; finds nothing itself."""

    def __init__(self, hooks: dict[str, Callable[[ModuleType], None]]) -> None:
        self.hooks = hooks
        self._busy: set[str] = set()

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        hook = self.hooks.get(fullname)
        if hook is None or fullname in self._busy:
            return None
        self._busy.add(fullname)
        try:
            spec = None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
        finally:
            self._busy.discard(fullname)
        if spec is None or spec.loader is None:
            return None
        del self.hooks[fullname]  # once per process
        spec.loader = _HookedLoader(spec.loader, hook)
        return spec


def _when_imported(
    finder: _PostImportFinder, name: str, hook: Callable[[ModuleType], None]
) -> None:
    mod = sys.modules.get(name)
    if mod is not None:
        try:
            hook(mod)
        except Exception as e:
            _warn(f"hook for {name} failed: {type(e).__name__}: {e}")
    else:
        finder.hooks[name] = hook


# ---------------------------------------------------------------- seed shifting


def _shift_seed(seed: Any, k: int, modulus: int | None) -> Any:
    if seed is None or isinstance(seed, bool):
        return seed
    if isinstance(seed, (str, bytes, bytearray)):  # random.seed accepts these
        return seed + (f"+{k}" if isinstance(seed, str) else f"+{k}".encode())
    if isinstance(seed, float):
        return seed + k
    try:
        s = int(seed.__index__())
    except (AttributeError, TypeError):
        return seed  # arrays and other exotic seeds pass through unchanged
    s += k
    return s % modulus if modulus is not None else s


def _seed_wrapper(fn: Callable[..., Any], k: int, modulus: int | None) -> Callable[..., Any]:
    if getattr(fn, _MARK, False):
        return fn

    def shifted(*args: Any, **kwargs: Any) -> Any:
        if args:
            args = (_shift_seed(args[0], k, modulus), *args[1:])
        else:
            for key in ("seed", "a"):  # torch/numpy name it seed, random.seed names it a
                if key in kwargs:
                    kwargs[key] = _shift_seed(kwargs[key], k, modulus)
                    break
        return fn(*args, **kwargs)

    shifted.__wrapped__ = fn  # type: ignore[attr-defined]
    shifted.__name__ = getattr(fn, "__name__", "seed")
    shifted.__qualname__ = getattr(fn, "__qualname__", shifted.__name__)
    shifted.__doc__ = getattr(fn, "__doc__", None)
    setattr(shifted, _MARK, True)
    return shifted


def _patch_attr(
    obj: Any, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]
) -> None:
    fn = getattr(obj, name, None)
    if fn is not None and not getattr(fn, _MARK, False):
        setattr(obj, name, make(fn))


# ---------------------------------------------------------------- the probe


class Probe:
    def __init__(self, out: str, seed_offset: int) -> None:
        self.out = out
        self.seed_offset = seed_offset
        self.pid = os.getpid()
        root = os.environ.get("PORTSIDE_PROBE_ROOT_PID")
        if not root:
            os.environ["PORTSIDE_PROBE_ROOT_PID"] = str(self.pid)
            root = str(self.pid)
        self.is_root = root == str(self.pid)
        # The run's seal key (core/run/seal.py): every line this probe writes is numbered and
        # tagged with it, so records copied from another run or edited afterwards show.
        seal = os.environ.get("PORTSIDE_PROBE_SEAL")
        self.writer = _writer.RecordWriter(out, seal.encode() if seal else None, self._get_rank,
                                           _values.finite, _packed.runs)
        # As the user set it: torch_xla writes its silent CPU default back into os.environ.
        self.pjrt_device = os.environ.get("PJRT_DEVICE")
        # Stride of the probe's own grad norm: a number fixes it (0: never); unset means every
        # step, except on CPU where it is stretched to keep its measured cost <= NORM_BUDGET.
        try:
            self.norm_every: int | None = max(0, int(os.environ["PORTSIDE_PROBE_NORM_EVERY"]))
        except (KeyError, ValueError):
            self.norm_every = None
        # A larger-inputs run ([larger] in the criteria): end the process after this many
        # optimizer steps (0: never), so a few steps at a bigger size cost a few steps.
        try:
            self.max_steps = max(0, int(os.environ.get("PORTSIDE_PROBE_MAX_STEPS") or 0))
        except ValueError:
            self.max_steps = 0
        self.ended_by = ""  # the exit record's reason when the probe itself ended the run
        self.finder = _PostImportFinder({})
        self.torch: Any = None
        self.Tensor: Any = None  # torch.Tensor, once torch is imported
        self.xla: dict[str, Any] | None = None  # torch_xla modules once the program imports it
        self.lock = threading.RLock()
        self.tls = threading.local()
        self._orig: dict[str, Any] = {}
        self._reset()

    def _reset(self) -> None:
        """Per-process state; also called in a forked child, which starts its own record."""
        self.writer.reset(self.pid)
        self.rank: int | None = None
        self.rank_known = False
        # Records in order (some waiting for values), and _Rows: usual steps not made records yet.
        self.queue: list[Any] = []
        self.steps = 0
        self.t_start = time.perf_counter()
        self.t_last_step = self.t_start
        self.t_last_flush = time.monotonic()
        self.loss: Any = None
        self.loss_seen: Any = None  # the first loss tensor, until the first facts record
        self.step_shardings: set[str] | None = None  # SPMD, first backward (_facts.compute_devices)
        self.loss_gen = 0
        self.backward_calls = 0
        self.opt_seen: dict[int, list[Any]] = {}  # id(opt) -> [index, loss_gen at last step]
        self.clip: tuple[Any, Any, Any] | None = None  # (total_norm, max_norm, norm_type)
        self.clip_calls = 0
        self.clip_value: Any = None  # clip_grad_value_'s clip_value since the previous step
        self.clip_reduced: bool | None = None  # gradients reduced across ranks when clipped
        # Training progress: the DataLoader iterator that fed the steps, its epoch and length.
        self.cur_iter: Any = None
        self.batch_samples = 0
        self.feeders: set[int] = set()  # threads reading batches ahead for a device loader
        self.consumed: int | None = None  # the loss's leading dimension, first steps only
        self.consumed_base: int | None = None  # at optimizer.step(): passes before it
        self.outer_calls = 0  # backward passes before the running optimizer.step()
        self.outer_loss: Any = None  # their loss, once a pass inside step() runs
        self.train_iter: Any = None  # weakref to the training iterator
        self.train_num = 0
        self.epoch = 0
        self.epoch_len: int | None = None
        self.sched_steps = 0
        self.scaler_skipped = 0
        self.opt_calls = 0  # optimizer pre-step hooks fired
        # Steps without an optimizer: one per backward pass (see FORMAT.md).
        self.any_opt = False
        self.in_opt = 0
        self.bw_pending: dict[str, Any] | None = None
        self.bw_leaves: list[Any] | None = None
        self.bw_clipped = False
        self.bw_hold: list[dict[str, Any]] | None = []  # unconfirmed backward steps; None: sure
        # Multi-process: gradient reductions seen since the last backward, DDP in use.
        self.world = 1  # processes in the run: read at the first step (_start)
        self.reduced = False
        self.reduce_calls = 0
        self.ddp = False
        self.pre_norm: Any = None
        self.last_norm_step = -(10**9)
        self.norm_auto = 1
        self.norm_off: str | None = None  # why the probe computes no norm of its own
        self.norm_cost: float | None = None  # seconds, CPU only
        self.xla_book = _xla.XlaBook()
        self.step_ema: float | None = None
        self.facts: dict[str, Any] | None = None
        # The run's settings (_settings.py): re-read into the facts when this is set (a new
        # optimizer, training iterator, autocast mode or GradScaler), never per step.
        self.settings_dirty = False
        self.autocast_modes: set[tuple[str, str]] = set()
        self.scaler_used = False
        self.watched = 0  # steps at the last re-read of the optimizers' settings (_watch)
        self.scaling = False  # GradScaler.scale was called: losses may carry the unscaled one
        self.opt_facts: list[dict[str, Any]] = []
        self.exited = False
        self.started = False  # first step seen: atexit and signal handlers installed
        # Wall time in all the probe's per-step work after step 1 (its overhead): the
        # optimizer hooks, the backward and clip wrappers, flushing; not the functions wrapped.
        self.probe_s = 0.0
        self.own_step = 0.0  # this step's share of probe_s so far
        self.own_win, self.own_win_n, self.own_i = 0.0, 0, 0  # the window being summed
        self.own_ring: list[float] = []  # the last OWN_RING windows' own time a step
        self.tpu_stats: Any = None  # torch.tpu._get_cache_stats, False when absent
        self.xla_latest: dict[str, Any] | None = None  # the step whose closure ran last
        self.xla_previous: dict[str, Any] | None = None  # and the one before it
        # Batches whose XLA values are copied out and written by a background thread: the copy
        # queues behind the step the device is executing, and the training loop must not wait.
        self.drain: list[list[dict[str, Any]]] = []
        self.drain_cv = threading.Condition(threading.RLock())  # signal handlers re-enter
        self.drain_busy = False
        self.drain_thread: threading.Thread | None = None
        self.io_lock = threading.RLock()  # a signal handler may write mid-write

    # ------------------------------------------------------------ install

    def install(self) -> None:
        sys.meta_path.insert(0, self.finder)
        # torch_xla's hook goes in now: `import torch_xla` looks it up before importing torch.
        _when_imported(self.finder, "torch_xla", self._on_torch_xla)
        _when_imported(self.finder, "torch", self._on_torch)
        _when_imported(self.finder, "torch_xla.distributed.parallel_loader",
                       self._wrap_parallel_loader)
        _when_imported(self.finder, "accelerate.data_loader", self._wrap_accelerate_loaders)
        if self.seed_offset:
            k = self.seed_offset
            _when_imported(
                self.finder,
                "random",
                lambda m: _patch_attr(m, "seed", lambda f: _seed_wrapper(f, k, None)),
            )
            _when_imported(
                self.finder,
                "numpy.random",
                lambda m: _patch_attr(m, "seed", lambda f: _seed_wrapper(f, k, 2**32)),
            )
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._after_fork)

    def _after_fork(self) -> None:
        # A forked child (DataLoader worker, fork-based multiprocessing) must not write the
        # parent's buffered records again; if it trains itself it gets its own file.
        self.pid = os.getpid()
        self.is_root = False
        self.lock = threading.RLock()
        self._reset()

    def _on_torch(self, torch: Any) -> None:
        self.torch = torch
        self.Tensor = torch.Tensor
        import torch.amp.grad_scaler  # noqa: F401  (already loaded by torch; cheap)
        import torch.nn.utils.clip_grad as clip_grad
        import torch.optim.optimizer as optimizer

        self._orig["get_total_norm"] = getattr(clip_grad, "_get_total_norm", None) or getattr(
            clip_grad, "get_total_norm", None
        )
        self._wrap_clip(torch)
        self._wrap_backward(torch)
        self._wrap_scaler(torch)
        for wrap in (self._wrap_loader, self._wrap_schedulers, self._wrap_distributed):
            try:
                wrap(torch)
            except Exception as e:  # an older torch without one of these: the rest still works
                _warn(f"{wrap.__name__}: {type(e).__name__}: {e}")
        self._load_settings(torch)
        optimizer.register_optimizer_step_pre_hook(self._pre_step)
        optimizer.register_optimizer_step_post_hook(self._post_step)
        if self.seed_offset:
            k = self.seed_offset
            for mod in (torch, torch.random):
                _patch_attr(mod, "manual_seed", lambda f: _seed_wrapper(f, k, 2**64))
            cuda = sys.modules.get("torch.cuda")
            if cuda is not None:
                for name in ("manual_seed", "manual_seed_all"):
                    _patch_attr(cuda, name, lambda f: _seed_wrapper(f, k, 2**64))

    def _on_torch_xla(self, torch_xla: Any) -> None:
        # torch_xla replaces torch.nn.utils.clip_grad_norm_ at import: wrap its replacement.
        if self.torch is None:
            return
        self._wrap_clip(self.torch)
        if self.seed_offset:
            import torch_xla.core.xla_model as xm

            k = self.seed_offset
            _patch_attr(xm, "set_rng_state", lambda f: _seed_wrapper(f, k, 2**64))

    # ------------------------------------------------------------ wrappers

    def _wrap_clip(self, torch: Any) -> None:
        # The public functions only. Each records the clipping it did; none of them calls
        # another one of them (clip_grad_norm_ calls the private _clip_grads_with_norm_, left
        # unwrapped; the deprecated clip_grad_norm calls the wrapped clip_grad_norm_), so no
        # reentry guard is needed and a step pays one wrapper.
        import torch.nn.utils.clip_grad as clip_grad

        utils = torch.nn.utils
        for mod in (utils, clip_grad):
            _patch_attr(mod, "clip_grad_norm_", self._clip_norm_wrapper)
            _patch_attr(mod, "clip_grad_value_", self._clip_value_wrapper)
        _patch_attr(utils, "clip_grads_with_norm_", self._clip_with_norm_wrapper)

    def _own_step_done(self, t0: float) -> None:
        """The step's own time (since `t0`, this call's included, and what its hooks added to
        own_step) into the self-report. Steps 0 and 1 carry one-time work (facts, the first
        file open) and are left out. Per window of OWN_WINDOW steps (one flush each), the mean
        own time a step goes into the ring whose median the exit record reports: robust to the
        preemptions that dominate a sum on a loaded machine, yet it includes the flushes a
        per-step median would leave out."""
        if self.steps < 3:
            self.own_step = 0.0
            return
        self.own_win_n += 1
        own = self.own_step + time.perf_counter() - t0  # the clock read as late as it can be
        self.own_step = 0.0
        self.probe_s += own
        self.own_win += own
        if self.own_win_n == OWN_WINDOW:
            ring = self.own_ring
            if len(ring) < OWN_RING:
                ring.append(self.own_win / OWN_WINDOW)
            else:
                ring[self.own_i % OWN_RING] = self.own_win / OWN_WINDOW
            self.own_i += 1
            self.own_win, self.own_win_n = 0.0, 0

    def _clip_norm_wrapper(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        import functools

        probe = self

        @functools.wraps(fn)  # keeps the signature: torch_xla's patcher compares signatures
        def clip_grad_norm_(parameters: Any, max_norm: Any, *args: Any, **kwargs: Any) -> Any:
            total = fn(parameters, max_norm, *args, **kwargs)
            t0 = time.perf_counter()
            probe._on_clip(total, max_norm, args[0] if args else kwargs.get("norm_type", 2.0))
            probe.own_step += time.perf_counter() - t0
            return total

        setattr(clip_grad_norm_, _MARK, True)
        return clip_grad_norm_

    def _clip_with_norm_wrapper(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        import functools

        probe = self

        @functools.wraps(fn)
        def clip_grads_with_norm_(
            parameters: Any, max_norm: Any, total_norm: Any, *args: Any, **kwargs: Any
        ) -> Any:
            result = fn(parameters, max_norm, total_norm, *args, **kwargs)
            t0 = time.perf_counter()
            probe._on_clip(total_norm, max_norm, None)
            probe.own_step += time.perf_counter() - t0
            return result

        setattr(clip_grads_with_norm_, _MARK, True)
        return clip_grads_with_norm_

    def _clip_value_wrapper(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        import functools

        probe = self

        @functools.wraps(fn)
        def clip_grad_value_(parameters: Any, clip_value: Any, *args: Any, **kwargs: Any) -> Any:
            result = fn(parameters, clip_value, *args, **kwargs)
            probe.clip_value = clip_value
            probe.clip_reduced = probe.ddp or probe.reduced
            probe.clip_calls += 1
            return result

        setattr(clip_grad_value_, _MARK, True)
        return clip_grad_value_

    def _wrap_loader(self, torch: Any) -> None:
        # Epoch boundaries and samples per step come from the DataLoader iterator that fed the
        # step: one attribute check and an add per batch.
        from torch.utils.data import dataloader as dl

        cls = dl._BaseDataLoaderIter
        nxt = cls.__next__
        if getattr(nxt, _MARK, False):
            return
        probe = self

        def __next__(self: Any) -> Any:
            batch = nxt(self)
            if probe.feeders and threading.get_ident() in probe.feeders:
                return batch  # read ahead for a device loader: counted when it yields it
            if self is not probe.cur_iter:
                probe.cur_iter = self
                probe.batch_samples = 0
            probe.batch_samples += _batch_len(batch)
            return batch

        setattr(__next__, _MARK, True)
        cls.__next__ = __next__

    def _wrap_parallel_loader(self, pl: Any) -> None:
        """torch_xla's MpDeviceLoader / ParallelLoader (also under accelerate and the HF
        Trainer on XLA): a background thread reads the DataLoader ahead, in bursts of up to
        an epoch. Its batches are counted when the per-device iterator hands one to the
        training loop (`_num_yielded` kept on it, as a DataLoader iterator has), never in
        that thread."""
        worker, nxt = pl.ParallelLoader._loader_worker, pl.PerDeviceLoader.next
        if getattr(nxt, _MARK, False):
            return
        probe = self

        def _loader_worker(self: Any) -> Any:
            me = threading.get_ident()
            probe.feeders.add(me)
            try:
                return worker(self)
            finally:
                probe.feeders.discard(me)

        def next(self: Any) -> Any:  # noqa: A001 - PerDeviceLoader's own name (__next__ calls it)
            item = nxt(self)
            self._num_yielded = getattr(self, "_num_yielded", 0) + 1
            if self is not probe.cur_iter:
                probe.cur_iter = self
                probe.batch_samples = 0
            probe.batch_samples += _batch_len(item)
            return item

        for fn in (_loader_worker, next):
            setattr(fn, _MARK, True)
        pl.ParallelLoader._loader_worker = _loader_worker
        pl.PerDeviceLoader.next = next

    def _wrap_accelerate_loaders(self, mod: Any) -> None:
        """HF accelerate's prepared loaders read their DataLoader one batch ahead (to know
        which batch is the last): counted where the DataLoader yields, each epoch's first step
        took two batches, its last none, and `batch` ran one ahead. Their batches count when
        the loader hands one to the loop; in a device loader's read-ahead thread (torch_xla's
        MpDeviceLoader over it) they are that loader's to count."""
        for name in ("DataLoaderShard", "DataLoaderDispatcher"):
            cls = getattr(mod, name, None)
            it = getattr(cls, "__iter__", None)
            if it is not None and not getattr(it, _MARK, False):
                cls.__iter__ = self._handed_over(it)

    def _handed_over(self, it: Callable[..., Any]) -> Callable[..., Any]:
        probe = self

        def __iter__(self: Any) -> Any:
            if probe.feeders and threading.get_ident() in probe.feeders:
                return it(self)
            return _HandedOver(probe, it(self), self)

        __iter__.__wrapped__ = it  # type: ignore[attr-defined]
        setattr(__iter__, _MARK, True)
        return __iter__

    def _wrap_schedulers(self, torch: Any) -> None:
        import torch.optim.lr_scheduler as sched

        probe = self

        def make(fn: Callable[..., Any]) -> Callable[..., Any]:
            def step(self: Any, *args: Any, **kwargs: Any) -> Any:
                probe.sched_steps += 1  # one add: cheaper than timing it
                return fn(self, *args, **kwargs)

            step.__wrapped__ = fn  # type: ignore[attr-defined]
            setattr(step, _MARK, True)
            return step

        for name in ("LRScheduler", "_LRScheduler", "ReduceLROnPlateau"):
            cls = getattr(sched, name, None)
            if cls is not None and "step" in cls.__dict__:
                _patch_attr(cls, "step", make)

    def _wrap_distributed(self, torch: Any) -> None:
        # Whether gradients were reduced across ranks before they were clipped: DDP reduces
        # inside backward; a hand-written loop calls all_reduce on the gradients (tensors with
        # more than one element: a scalar all_reduce is a loss being averaged for logging).
        import torch.distributed as dist

        probe = self
        if not dist.is_available():
            return

        def make(fn: Callable[..., Any]) -> Callable[..., Any]:
            def all_reduce(tensor: Any, *args: Any, **kwargs: Any) -> Any:
                with contextlib.suppress(Exception):
                    if tensor.numel() > 1:
                        probe.reduced = True
                        probe.reduce_calls += 1
                return fn(tensor, *args, **kwargs)

            all_reduce.__wrapped__ = fn  # type: ignore[attr-defined]
            all_reduce.__name__ = "all_reduce"
            setattr(all_reduce, _MARK, True)
            return all_reduce

        import torch.distributed.distributed_c10d as c10d

        for mod in (dist, c10d):
            _patch_attr(mod, "all_reduce", make)
        from torch.nn.parallel import DistributedDataParallel as DDP

        init = DDP.__init__

        def make_init(fn: Callable[..., Any]) -> Callable[..., Any]:
            def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
                probe.ddp = True
                fn(self, *args, **kwargs)

            setattr(__init__, _MARK, True)
            return __init__

        if not getattr(init, _MARK, False):
            DDP.__init__ = make_init(init)

    def _wrap_backward(self, torch: Any) -> None:
        # Only torch.autograd.backward: Tensor.backward calls it (looked up at each call), so
        # one wrapper sees both, and a step pays one wrapper, not two.
        import functools

        probe = self
        autograd_backward = torch.autograd.backward
        if getattr(autograd_backward, _MARK, False):
            return

        @functools.wraps(autograd_backward)
        def backward(tensors: Any, grad_tensors: Any = None, *args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            tls = probe.tls
            if grad_tensors is not None or getattr(tls, "bw", False):
                # An explicit gradient is not a loss; inside a backward, a nested one.
                return autograd_backward(tensors, grad_tensors, *args, **kwargs)
            probe._on_backward(tensors)
            tls.bw = True
            t1 = time.perf_counter()
            try:
                out = autograd_backward(tensors, grad_tensors, *args, **kwargs)
            finally:
                t2 = time.perf_counter()
                tls.bw = False
            # Edge to edge, less the backward pass itself.
            probe.own_step += t1 - t0 + time.perf_counter() - t2
            if not probe.any_opt:
                probe._after_backward()  # times itself
            return out

        setattr(backward, _MARK, True)
        torch.autograd.backward = backward

    def _wrap_scaler(self, torch: Any) -> None:
        import functools

        cls = torch.amp.GradScaler
        scale = cls.scale
        if getattr(scale, _MARK, False):
            return
        probe = self

        @functools.wraps(scale)
        def scaled(self: Any, outputs: Any) -> Any:
            out = scale(self, outputs)
            probe.scaling = True  # backward() looks for the mark below from now on
            # Remember the unscaled loss on the scaled tensor: backward() is called on the latter.
            if out is not outputs and isinstance(outputs, torch.Tensor):
                with contextlib.suppress(Exception):
                    out._portside_unscaled = outputs
            return out

        setattr(scaled, _MARK, True)
        cls.scale = scaled
        step = cls.step

        @functools.wraps(step)
        def scaler_step(self: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
            probe._optimizer_seen()
            if not probe.scaler_used and self.is_enabled():
                probe.scaler_used = probe.settings_dirty = True
            before = probe.opt_calls
            out = step(self, optimizer, *args, **kwargs)
            if probe.opt_calls == before:  # inf/NaN gradients: the scaler skipped the step
                probe.scaler_skipped += 1
            return out

        setattr(scaler_step, _MARK, True)
        cls.step = scaler_step

    # ------------------------------------------------------------ events from the program

    def _on_backward(self, t: Any) -> None:
        """A backward pass from `t` (torch.autograd.backward's tensors, no gradient given)."""
        try:
            if type(t) is not self.Tensor:
                if isinstance(t, (list, tuple)) and len(t) == 1:
                    t = t[0]
                if not isinstance(t, self.Tensor):
                    return
            if t.numel() != 1:
                return
            if self.any_opt and not self.scaling and t.is_cpu:
                # The usual pass, in an optimizer's loop on the CPU: computed already, so read
                # now and the step keeps a number, not a tensor (a later read would see an
                # in-place change, and costs more than this one).
                loss = t.item()
            else:
                loss = self._pass_loss(t)
            if self.backward_calls and self.loss is not None:
                # Gradient accumulation: the step's loss is the sum of its micro-batch losses
                # (each divided by the number of micro-batches, as such loops do). An LBFGS
                # closure's passes run inside step(): the last one is the step's loss. Both
                # at once (Lightning accumulating: the last micro-batch's pass runs in its
                # closure, inside step()): the passes before step() plus the last inside.
                if not self.in_opt:
                    loss = self.loss + loss
                elif self.outer_calls:
                    if self.backward_calls == self.outer_calls:  # the first pass inside
                        self.outer_loss = self.loss
                    if self.outer_loss is not None:
                        loss = self.outer_loss + loss
            self.loss = loss
            self.loss_gen += 1
            self.backward_calls += 1
            self.reduced = False  # new gradients: not reduced yet
            if self.steps < CONSUMED_STEPS:
                n = _consumed(getattr(t, "_portside_unscaled", t) if self.scaling else t)
                if n:
                    # Summed over the step's micro-batches; inside step() (an LBFGS
                    # closure's passes re-read one batch) the last pass's, after the passes
                    # before step().
                    if self.in_opt and self.backward_calls == self.outer_calls + 1:
                        self.consumed_base = self.consumed  # the first pass inside step()
                    base = self.consumed_base if self.in_opt else self.consumed
                    self.consumed = (base or 0) + n
        except Exception as e:
            _warn(f"backward hook: {type(e).__name__}: {e}")

    def _pass_loss(self, t: Any) -> Any:
        """The loss of a pass off the usual path (a GradScaler's, a device's, before the first
        optimizer step): what the step keeps of it; a loop without an optimizer gets its
        backward steps here."""
        loss = getattr(t, "_portside_unscaled", t) if self.scaling else t
        if loss.is_cpu:
            if self.facts is None:
                self.loss_seen = loss  # its device goes into the first facts record
            loss = loss.item()  # as on the usual path
        else:
            loss = loss.detach()
            if loss.device.type != "xla":
                loss = loss.clone()  # async devices: the program may reuse the storage
            elif self.facts is None and self.step_shardings is None:
                self._load_xla()  # SPMD: the graph's shardings, before a sync can run it
                self.step_shardings = _facts.loss_shardings(self.xla, loss) or set()
        if not self.any_opt and not self.in_opt:
            if self.bw_pending is not None:
                self._emit_backward_step()  # the previous pass was a step of its own
            if self.bw_leaves is None:
                self.bw_leaves = _graph_leaves(t)
        return loss

    def _after_backward(self) -> None:
        """No optimizer has stepped in this process: this backward pass may be a training step
        of a hand-written update. Its record is written at the next backward (or at exit), so
        that the clipping done in between is part of it."""
        if self.in_opt or self.any_opt or self.bw_leaves is None:
            return
        t0 = time.perf_counter()
        try:
            if not self.started:
                self._start()
            norm = None
            if not self.bw_clipped and self._norm_due():
                grads = [p.grad for p in self.bw_leaves if p.grad is not None]
                norm = self._own_norm(grads, t0)
            self.bw_pending = {"loss": self.loss, "norm": norm}
        except Exception as e:
            _warn(f"after-backward hook: {type(e).__name__}: {e}")
        self.own_step += time.perf_counter() - t0

    def _optimizer_seen(self) -> None:
        # An optimizer (or a scaler stepping one) exists: backward passes are not steps.
        if not self.any_opt:
            self.any_opt = True
            if self.bw_hold:
                self.bw_hold.pop(0)
                self._drop_backward_steps()
            if self.bw_pending is not None:
                self.bw_pending = None
                self.last_norm_step = -(10**9)  # that norm was not this step's

    def _sink(self) -> list[dict[str, Any]]:
        """Where a new record goes: held back while backward steps are unconfirmed."""
        return self.bw_hold if self.bw_hold and not self.any_opt else self.queue

    def _confirm_backward_steps(self) -> None:
        if self.bw_hold:
            with self.lock:
                self.queue.extend(self.bw_hold)
        self.bw_hold = None

    def _drop_backward_steps(self) -> None:
        """An optimizer stepped after all: the held backward passes were its micro-batches."""
        held, self.bw_hold = self.bw_hold or [], None
        for rec in held:
            if rec["type"] == "step":
                self.steps -= 1
                self.backward_calls += rec.get("backward_calls") or 0
                self.batch_samples += rec.get("samples") or 0
                if rec.get("consumed"):
                    self.consumed = (self.consumed or 0) + rec["consumed"]
                if rec.get("loss") is not None and self.loss is not None:
                    with contextlib.suppress(Exception):  # the step's loss: all its passes
                        self.loss = self.loss + rec["loss"]
            elif rec["type"] == "facts" and rec is self.facts:
                self.facts = None

    def _emit_backward_step(self) -> None:
        pend, self.bw_pending = self.bw_pending, None
        if pend is None:
            return
        t0 = time.perf_counter()
        try:
            self.bw_clipped = self.clip is not None
            if self.bw_hold is not None and not self.bw_hold:
                self.bw_hold.append({"type": "hold"})  # a marker: holding starts
            self._record(None, pend["loss"], pend["norm"], [], "backward")
            if self.bw_hold is not None and len(self.bw_hold) > BW_CONFIRM:
                self.bw_hold.pop(0)
                self._confirm_backward_steps()
        except Exception as e:
            _warn(f"backward step: {type(e).__name__}: {e}")
        self._own_step_done(t0)

    def _on_clip(self, total: Any, max_norm: Any, norm_type: Any) -> None:
        try:
            if isinstance(total, self.Tensor):
                if total.is_cpu:
                    total = total.item()  # as the loss: a number now
                else:
                    if total.requires_grad:  # clip_grad_norm_ returns one made under no_grad
                        total = total.detach()
                    if total.device.type != "xla":
                        total = total.clone()
            self.clip = (total, max_norm, norm_type)
            self.clip_calls += 1
            self.clip_reduced = self.ddp or self.reduced
        except Exception as e:
            _warn(f"clip hook: {type(e).__name__}: {e}")

    def _norm_due(self) -> bool:
        stride = self.norm_every if self.norm_every is not None else self.norm_auto
        return bool(
            not self.clip_calls
            and not self.norm_off
            and stride
            and self.steps - self.last_norm_step >= stride
        )

    def _own_norm(self, grads: list[Any], t0: float) -> Any:
        """The 2-norm of these gradients (lazily on XLA: no sync), or None."""
        torch = self.torch
        if not grads or any(g.is_sparse for g in grads):
            return None
        on_xla = grads[0].device.type == "xla"
        if on_xla:
            if self.norm_every is None:
                # By default not in the step graph (on XLA:CPU its reductions cost ~10% of
                # the step there): every k-th optimizer step, a graph of its own after the
                # step's sync (_xla.py). Backward-only steps get none.
                if self.in_opt:
                    if self.xla_book.later(grads):
                        self.norm_auto = _xla.NORM_EVERY
                    self.last_norm_step = self.steps
                return None
            # Every step once asked (PORTSIDE_PROBE_NORM_EVERY): steps with and without it
            # would be two graphs.
            self.norm_every = 1
        with torch.no_grad():
            fn = self._orig.get("get_total_norm")
            # On XLA torch has no foreach kernels and runs these same per-tensor ops, after
            # ~0.15 ms of Python grouping per step that this skips.
            if fn is not None and not on_xla:
                norm = fn(grads, 2.0)
            else:
                norm = torch.linalg.vector_norm(
                    torch.stack([torch.linalg.vector_norm(g.detach()) for g in grads])
                )
        self.last_norm_step = self.steps
        if norm.device.type == "cpu":  # synchronous there, so this is its real cost
            cost = time.perf_counter() - t0
            self.norm_cost = cost if self.norm_cost is None else 0.8 * self.norm_cost + 0.2 * cost
        return norm

    def _pre_step(self, opt: Any, args: Any, kwargs: Any) -> None:
        # Unclipped steps: compute the total grad norm ourselves (lazily on XLA: no sync). It
        # is one pass over the gradients; PORTSIDE_PROBE_NORM_EVERY=k thins it out (0: never).
        t0 = time.perf_counter()
        if self.max_steps and self.steps >= self.max_steps:
            self._end_at_max_steps()
        self.in_opt += 1  # backward calls inside step() (LBFGS closures) belong to this step
        self.opt_calls += 1
        if not self.any_opt:
            self._optimizer_seen()  # held backward steps become this step's passes
        self.outer_calls = self.backward_calls  # the passes before step(): see _on_backward
        if not self.clip_calls and self._norm_due():
            try:
                t_norm = time.perf_counter()  # its cost, as the CPU stride follows it
                grads = [p.grad for g in opt.param_groups for p in g["params"]
                         if p.grad is not None]
                self.pre_norm = self._own_norm(grads, t_norm)
            except Exception as e:
                _warn(f"pre-step hook: {type(e).__name__}: {e}")
        self.own_step += time.perf_counter() - t0

    def _end_at_max_steps(self) -> None:
        """Before the step after the last one asked for: the previous step's graph has run
        (on XLA, its sync is past), so its records are final. The program ends as sys.exit(0)
        ends it (its finally blocks and exit handlers run; ours writes the exit record, which
        says why)."""
        self.ended_by = "max-steps"
        raise SystemExit(0)

    def _post_step(self, opt: Any, args: Any, kwargs: Any) -> None:
        t0 = time.perf_counter()
        if self.in_opt:
            self.in_opt -= 1
        try:
            seen = self.opt_seen.get(id(opt))
            new_opt = seen is None
            if seen is None:
                seen = self.opt_seen[id(opt)] = [len(self.opt_seen), 0]
            # No backward since this optimizer's last step: no loss of its own.
            loss = self.loss if self.loss_gen != seen[1] else None
            seen[1] = self.loss_gen
            groups = opt.param_groups
            # One group, the usual case, without a comprehension: in Python 3.11 each one is a
            # function call of its own, dear between torch's kernels.
            lr = [groups[0].get("lr")] if len(groups) == 1 else [g.get("lr") for g in groups]
            book = self.xla_book
            grads = book.take() if book.grads is not None else None
            rec = self._record(opt, loss, self.pre_norm, lr, "optimizer", seen[0], new_opt,
                               grads is not None)
            if grads is not None and rec is not None:
                book.attach(rec, grads)
        except Exception as e:
            _warn(f"post-step hook: {type(e).__name__}: {e}")
        self._own_step_done(t0)

    def _record(self, opt: Any, loss: Any, own_norm: Any, lr: list[Any], source: str,
                opt_index: int | None = None, new_opt: bool = False,
                want_dict: bool = False) -> dict[str, Any] | None:
        """One step record: from an optimizer step, or (no optimizer) a backward pass. This
        runs at every step, between the program's own kernels, where each line of Python
        costs several times what it does in a loop: the step's values are taken as one tuple
        (a `_Row`), and the CPU's usual step stays one until the flush makes it a record
        (`_as_dict`). Returns the record when it was made now (else None; `want_dict`: make
        it now)."""
        now = time.perf_counter()
        if not self.started:
            self._start()
        it = self.cur_iter
        step_s = now - self.t_last_step
        more = self._distributed(opt) if self.world > 1 else None
        if self.consumed is not None:  # the first steps only (CONSUMED_STEPS)
            more = dict(more or (), consumed=self.consumed)
            self.consumed = None
        row = (time.time(), self.steps, opt_index, source, loss, self.backward_calls, self.clip,
               own_norm, self.clip_calls, lr, step_s, self.clip_value,
               self._progress(it) if it is not None else None, self.sched_steps,
               self.scaler_skipped, more)
        self.scaler_skipped = 0
        if self.norm_cost is not None and self.norm_every is None and self.steps:
            # The probe's own norm on the CPU: its stride keeps it within NORM_BUDGET.
            ema = step_s if self.step_ema is None else 0.8 * self.step_ema + 0.2 * step_s
            self.step_ema = ema
            self.norm_auto = min(NORM_MAX_STRIDE,
                                 max(1, math.ceil(self.norm_cost / (NORM_BUDGET * max(ema, 1e-9)))))
        self.t_last_step = now
        self.steps += 1
        self.clip = None
        self.clip_calls = 0
        self.clip_value = None
        self.pre_norm = None
        self.backward_calls = 0
        self.reduce_calls = 0

        if self.facts is None or new_opt or self.settings_dirty:
            rec = self._as_dict(row)  # the first record's values are made the careful way
            fresh = self.facts is None
            if fresh and type(loss) is float:
                loss, self.loss_seen = self.loss_seen, None
            if opt is not None and (fresh or new_opt):
                self._update_facts(opt, loss)
            elif fresh:
                self._update_facts_params(self.bw_leaves or [], loss)
            self._update_settings(opt if new_opt else None, fresh)
        else:
            rec = None
        if self.tpu_stats is None:  # looked up once: torch.__getattr__ is not free
            tpu = getattr(self.torch, "tpu", None)
            self.tpu_stats = getattr(tpu, "_get_cache_stats", False) if tpu is not None else False
        # The CPU's usual step holds numbers only (loss and norm were read when they were
        # made): it is written as it is (a NaN in it: _values.finite, by the writer). Anything
        # else goes by where its tensors are.
        total = own_norm if row[6] is None else row[6][0]
        if (type(loss) is float or loss is None) and (type(total) is float or total is None) \
                and source == "optimizer" and (type(lr[0]) is float if len(lr) == 1
                                               else all(type(v) is float for v in lr)):
            if rec is None and not (want_dict or more or self.tpu_stats):
                self.queue.append(row)  # one append: atomic, as the flush's slice of the queue
            else:
                rec = rec or self._as_dict(row)
                if self.tpu_stats:
                    self._tpu_cache(rec)
                self.queue.append(rec)
        else:
            rec = rec or self._as_dict(row)
            if self.tpu_stats:
                self._tpu_cache(rec)
            self._sink_tensors(rec)
        if self.steps - self.watched >= WATCH_EVERY:
            self._watch()
        if len(self.queue) >= FLUSH_EVERY_STEPS or \
                time.monotonic() - self.t_last_flush >= FLUSH_EVERY_S:
            self.flush()
        return rec

    def _as_dict(self, row: _Row) -> dict[str, Any]:
        """The step record a `_Row` stands for, its keys in FORMAT.md's order."""
        (t, step, opt_index, source, loss, backward_calls, clip, own_norm, clip_calls, lr,
         step_s, clip_value, progress, sched_steps, skipped, more) = row
        if clip is not None:
            total, max_norm, norm_type = clip
            source_norm = "clip"
        elif own_norm is not None:
            total, max_norm, norm_type, source_norm = own_norm, None, None, "probe"
        else:
            total = max_norm = norm_type = source_norm = None
        rec: dict[str, Any] = {
            "type": "step",
            "t": t,
            "pid": self.pid,
            "rank": self.rank if self.rank_known else self._get_rank(),
            "step": step,
            "opt": opt_index,
            "source": source,
            "loss": loss,
            "backward_calls": backward_calls,
            "grad_norm": total,
            "grad_norm_source": source_norm,
            "max_norm": max_norm,
            "clip_calls": clip_calls,
            "lr": lr,
            "step_s": step_s,
        }
        if norm_type is not None and norm_type != 2:
            rec["norm_type"] = norm_type
        if clip_value is not None:
            rec["clip_value"] = clip_value
        if progress is not None:
            rec["epoch"], rec["batch"], rec["epoch_batches"], rec["samples"] = progress
        if sched_steps:
            rec["sched_steps"] = sched_steps
        if skipped:
            rec["skipped"] = skipped
        if more:
            rec.update(more)
        return rec

    def _distributed(self, opt: Any) -> dict[str, Any]:
        """A multi-process step's reduction facts (FORMAT.md, multi-process runs)."""
        more: dict[str, Any] = {}
        if self.clip_calls:
            more["clip_reduced"] = bool(self.clip_reduced)
        more["reduce_calls"] = self.reduce_calls
        more["ddp"] = self.ddp
        if opt is not None and self.steps % PARAM_SUM_EVERY == 0:
            more["param_sum"] = _param_sum(self.torch, opt)
        return more

    def _tpu_cache(self, rec: dict[str, Any]) -> None:
        """TorchTPU's compilation cache counters, into the step record."""
        try:
            stats = self.tpu_stats()
            get = stats.get if isinstance(stats, dict) else lambda k: getattr(stats, k, None)
            rec["cache_requests"] = get("num_cache_reqs")
            rec["cache_hits"] = get("num_cache_hits")
            if isinstance(rec["cache_requests"], int) and isinstance(rec["cache_hits"], int):
                rec["cache_misses"] = rec["cache_requests"] - rec["cache_hits"]
        except Exception:
            pass

    def _sink_tensors(self, rec: dict[str, Any]) -> None:
        """A record that holds tensors (or a backward step, which may be held back): CPU
        values are read now, XLA ones after the step's sync, other devices' at the flush."""
        kind = self._kind(rec)
        with self.lock:
            self._sink().append(rec)
            if kind == "xla":
                rec["_wait"] = True
                self.xla["xm"].add_step_closure(self._xla_closure, args=(rec,))
            elif kind == "cpu":
                # Read now: a tensor the program changes in place (a scheduler's tensor lr)
                # would be wrong at the flush.
                rec["_wait"] = "cpu"
                _values.resolve(self.torch, [rec], True)
            else:
                rec["_wait"] = "lazy"  # CUDA & co: read at the flush, one sync per flush

    def _watch(self) -> None:
        """Re-read the optimizers' settings (every WATCH_EVERY steps): a change made by hand
        mid-run goes into a new facts record."""
        self.watched = self.steps
        if not self.opt_facts:
            return
        mod = getattr(self, "settings", None)
        if mod is not None and mod.WATCH.poll(self.steps - 1, self.opt_facts):
            self._update_settings(None, False)

    def _kind(self, rec: dict[str, Any]) -> str:
        """Where the record's tensors live: 'cpu' (read now), 'xla' (step closure), 'lazy'."""
        torch = self.torch
        loss = rec["loss"]
        if type(loss) is torch.Tensor and loss.is_cpu:  # the usual case, at every step
            return "cpu"
        for v in (loss, rec["grad_norm"], *rec["lr"]):
            if isinstance(v, torch.Tensor):  # the first one tells: a step runs on one device
                if v.is_cpu:
                    return "cpu"
                t = v.device.type
                if t == "xla":
                    self._load_xla()
                    if self.xla is not None:
                        return "xla"
                return "cpu" if t == "cpu" else "lazy"
        return "cpu"

    # ------------------------------------------------------------ torch_xla

    def _xla_closure(self, rec: dict[str, Any]) -> None:
        # Runs right after the step's graph was launched: counters are host-side reads. The
        # values are copied out one step later (by then their execution has finished), so the
        # probe never makes the program wait or compile.
        t0 = time.perf_counter()
        try:
            self.xla_book.metrics(self.xla["met"], rec)
            self.norm_auto = self.xla_book.launch(self.torch, self.xla, rec, self._xla_alone,
                                                  self.norm_auto, _warn)
            with self.lock:
                rec["_wait"] = "ran"
                self.xla_previous, self.xla_latest = self.xla_latest, rec
            self._maybe_flush()
        except Exception as e:
            _warn(f"xla closure: {type(e).__name__}: {e}")
        self.own_step += time.perf_counter() - t0

    def _load_xla(self) -> None:
        if self.xla is None:
            self.xla = _xla.load(sys.modules)

    def _xla_alone(self) -> bool:
        """One process, no SPMD: the probe's XLA norm may follow its own cost (not across
        ranks: an SPMD norm is a collective, which every process must launch alike)."""
        if self.world != 1:
            return False
        try:
            return not self.xla["xr"].is_spmd()
        except Exception:
            return True

    # ------------------------------------------------------------ facts

    def _get_rank(self) -> int | None:
        if not self.rank_known:
            self.rank, self.rank_known = _facts.rank(self.xla, self.is_root), True
        return self.rank

    def _norm_mode(self) -> str:
        """How the probe computes its own grad norm on unclipped steps (for the facts)."""
        if self.xla_book.stride:
            return (f"every {self.xla_book.stride}th step or sparser (torch_xla: a graph of its "
                    "own after the step's sync; its compilation is left out of compiles)")
        if self.norm_off:
            return f"off ({self.norm_off}; PORTSIDE_PROBE_NORM_EVERY=1 turns it on)"
        if self.norm_every == 0:
            return "off (PORTSIDE_PROBE_NORM_EVERY=0)"
        if self.norm_every is not None:
            return "every step" if self.norm_every == 1 else f"every {self.norm_every} steps"
        return "auto (every step; on CPU stretched to cost <= 0.3% of the step)"

    def _update_facts(self, opt: Any, loss: Any = None) -> None:
        self._update_facts_params([p for g in opt.param_groups for p in g["params"]], loss)

    # ------------------------------------------------------------ settings (_settings.py)

    def _load_settings(self, torch: Any) -> None:
        """_settings.py (FORMAT.md: settings in `facts`)."""
        try:
            mod = _sibling("_settings")
            mod.wrap_autocast(torch, self._autocast_seen, _MARK)
            self.settings = mod
        except Exception as e:
            self.settings = None
            _warn(f"settings: {type(e).__name__}: {e}")

    def _autocast_seen(self, device: str, dtype: str) -> None:
        if (device, dtype) not in self.autocast_modes:
            self.autocast_modes.add((device, dtype))
            self.settings_dirty = True

    def _update_settings(self, opt: Any, fresh: bool) -> None:
        """Optimizers, data pipeline and precision into the facts: in place in a facts record
        made by this step, else a new facts record when one of them changed."""
        self.settings_dirty = False
        mod, facts = getattr(self, "settings", None), self.facts
        if mod is None or facts is None:
            return
        try:
            if opt is not None:
                self.opt_facts.append(dict(mod.optimizer_facts(opt, len(self.opt_facts),
                                                               self.torch),
                                           first_step=self.steps - 1))  # a swap's step
            new = {"optimizers": list(self.opt_facts),
                   "data": mod.data_facts(self.train_iter() if self.train_iter else None),
                   "precision": mod.precision_facts(self.torch, facts["param_dtypes"],
                                                    self.autocast_modes, self.scaler_used)}
        except Exception as e:
            _warn(f"settings: {type(e).__name__}: {e}")
            return
        if fresh:
            facts.update(new)
        elif any(facts.get(k) != v for k, v in new.items()):
            self.facts = dict(facts, t=time.time(), **new)
            self._sink().append(self.facts)

    def _progress(self, it: Any) -> tuple[int, Any, int | None, int]:
        """Where in training the step is: epoch and batch of the DataLoader iterator that fed
        it (a new iterator, or the same one restarted, is a new epoch), its length, samples
        since the last step."""
        num = getattr(it, "_num_yielded", None)
        known = self.train_iter() if self.train_iter is not None else None
        if known is not it or (isinstance(num, int) and num < self.train_num):
            if self.train_iter is not None:
                self.epoch += 1
            self.train_iter = weakref.ref(it)
            self.settings_dirty = True  # its loader's settings: read once per iterator
            try:
                self.epoch_len = len(it)
            except Exception:
                self.epoch_len = None
        self.train_num = num if isinstance(num, int) else 0
        samples, self.batch_samples = self.batch_samples, 0
        return self.epoch, num, self.epoch_len, samples

    def _update_facts_params(self, params: list[Any], loss: Any = None) -> None:
        devices: list[str] = []
        dtypes: list[str] = []
        for p in params:
            d, t = str(p.device), str(p.dtype)
            if d not in devices:
                devices.append(d)
            if t not in dtypes:
                dtypes.append(t)
        if self.facts is not None:
            old_d, old_t = self.facts["param_devices"], self.facts["param_dtypes"]
            new_d = old_d + [d for d in devices if d not in old_d]
            new_t = old_t + [t for t in dtypes if t not in old_t]
            if new_d == old_d and new_t == old_t:
                return
            self.facts = dict(self.facts, t=time.time(), param_devices=new_d, param_dtypes=new_t)
            self._sink().append(self.facts)
            self.settings_dirty = True  # the precision facts hold the dtypes too
            return
        self._load_xla()
        self.facts = _facts.facts_record(
            self.torch, self.xla, pid=self.pid, rank=self._get_rank(), devices=devices,
            dtypes=dtypes, pjrt_device=self.pjrt_device, seed_offset=self.seed_offset,
            probe_norm=self._norm_mode(), loss=loss, now=time.time(), params=params,
            shardings=self.step_shardings)
        self._sink().append(self.facts)

    # ------------------------------------------------------------ values and writing

    def _maybe_flush(self) -> None:
        if (
            len(self.queue) >= FLUSH_EVERY_STEPS
            or time.monotonic() - self.t_last_flush >= FLUSH_EVERY_S
        ):
            self.flush()

    def flush(self, final: bool = False, force: bool = True) -> None:
        """Write every record whose values are known; with final, also the waiting ones."""
        with self.lock:
            self.t_last_flush = time.monotonic()
            n = 0
            for rec in self.queue:
                if type(rec) is tuple:  # a _Row: numbers only, final when it was taken
                    n += 1
                    continue
                wait = rec.get("_wait")
                if not final and (
                    wait is True
                    or (wait and (rec is self.xla_latest or rec is self.xla_previous))
                ):
                    # Its XLA step has not run yet, or may still be executing: copying its
                    # values now would make the host wait for the device (a pipeline stall).
                    break
                n += 1
            out = [self._as_dict(r) if type(r) is tuple else r for r in self.queue[:n]]
            del self.queue[:n]
            if not out:
                return
            if not final and (
                any(r.get("_wait") == "ran" for r in out) or self.drain or self.drain_busy
            ):
                self._drain_later(out)  # behind what the writer holds: the file stays in order
                return
            if final:
                self._drain_wait(DRAIN_WAIT_S if force else DRAIN_WAIT_SIGNAL_S)
            self._complete(out, force)

    def _complete(self, out: list[dict[str, Any]], force: bool) -> None:
        if self.xla is not None:  # XLA values whose step ran: one batched copy, no sync
            _xla.fetch(self.torch, self.xla,
                       [r for r in out if r.get("_wait") == "ran" or (force and "_wait" in r)])
        _values.resolve(self.torch, out, force)  # CUDA & co: one sync per flush, not per step
        self._write(out)

    def _drain_later(self, out: list[dict[str, Any]]) -> None:
        with self.drain_cv:
            self.drain.append(out)
            self.drain_cv.notify()
        if self.drain_thread is None:
            self.drain_thread = threading.Thread(
                target=self._drain_loop, name="portside-probe", daemon=True
            )
            self.drain_thread.start()

    def _drain_loop(self) -> None:
        while True:
            with self.drain_cv:
                while not self.drain:
                    self.drain_cv.wait()
                out = self.drain.pop(0)
                self.drain_busy = True
            try:
                self._complete(out, True)  # the values were computed: reading them cannot compile
            except Exception as e:
                _warn(f"writer: {type(e).__name__}: {e}")
            with self.drain_cv:
                self.drain_busy = False
                self.drain_cv.notify_all()

    def _drain_wait(self, timeout: float) -> None:
        """Let the background writer finish what it holds, so the file stays in step order."""
        if self.drain_thread is None or threading.current_thread() is self.drain_thread:
            return
        deadline = time.monotonic() + timeout
        with self.drain_cv:
            while self.drain or self.drain_busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    _warn("writer still busy at exit; its records may be missing")
                    return
                self.drain_cv.wait(left)

    def _write(self, recs: list[dict[str, Any]]) -> None:
        with self.io_lock:  # a signal handler may write mid-write
            self.writer.write(recs)

    # ------------------------------------------------------------ exit and signals

    def _start(self) -> None:
        self.started = True
        self.world = _facts.world_size()
        import atexit

        # Registered at the first step, i.e. after torch_xla registered its own exit hook:
        # atexit runs in reverse, so ours reads the XLA metrics before the runtime shuts down.
        atexit.register(self.finish, "atexit")
        if threading.current_thread() is threading.main_thread():
            import signal

            for sig in (signal.SIGTERM, signal.SIGINT):
                try:
                    prev = signal.getsignal(sig)
                    signal.signal(sig, self._signal_handler(sig, prev))
                except (ValueError, OSError):
                    pass
        mp_util = sys.modules.get("multiprocessing.util")
        if not self.is_root and mp_util is not None:
            # A fork-started multiprocessing child leaves through os._exit (no atexit).
            with contextlib.suppress(Exception):
                mp_util.Finalize(None, self.finish, args=("atexit",), exitpriority=0)

    def _signal_handler(self, sig: int, prev: Any) -> Callable[[int, Any], None]:
        import signal

        def handler(signum: int, frame: Any) -> None:
            if prev is signal.SIG_DFL and signum == signal.SIGTERM:
                # The default would kill us without atexit: write everything, then die the same way.
                self.finish(f"signal:{signum}", force=False)
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)
                return
            with contextlib.suppress(Exception):
                self.flush(force=False)
            if callable(prev):
                prev(signum, frame)  # e.g. KeyboardInterrupt; atexit writes the exit record
            elif prev is signal.SIG_DFL:
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)

        return handler

    def finish(self, reason: str, force: bool = True) -> None:
        """Write what is left and the exit record; once per process."""
        if self.exited or os.getpid() != self.pid or not self.started:
            return
        self.exited = True
        try:
            rec: dict[str, Any] = {
                "type": "exit",
                "t": time.time(),
                "pid": self.pid,
                "rank": self._get_rank(),
                "steps": self.steps,
                "reason": self.ended_by or reason,
                "probe_s": self.probe_s,
            }
            if self.own_ring:
                rec["probe_step_s"] = sorted(self.own_ring)[len(self.own_ring) // 2]
            if self.bw_pending is not None:  # the last step of a loop without an optimizer
                self._emit_backward_step()
            if self.bw_hold:
                self.bw_hold.pop(0)
                self._confirm_backward_steps()
            rec["steps"] = self.steps
            # On a signal XLA values still on the device stay null: reading them could compile.
            self.flush(final=True, force=force)
            if self.xla is not None:
                self.xla_book.exit(self.xla, rec)
            rec.update(_facts.peak_memory(self.xla is not None))
            self._write([rec])
        except Exception as e:
            _warn(f"exit: {type(e).__name__}: {e}")


def _batch_len(batch: Any) -> int:
    """Samples in a DataLoader batch: the first dimension of its first tensor."""
    b = batch
    for _ in range(4):
        if isinstance(b, dict) and b:
            b = next(iter(b.values()))
        elif isinstance(b, (list, tuple)) and b and not isinstance(b[0], (str, bytes)):
            b = b[0]
        else:
            break
    shape = getattr(b, "shape", None)
    if shape:
        return int(shape[0])
    return len(b) if isinstance(b, (list, tuple)) else 1


class _HandedOver:
    """A loader's batches as its loop takes them: the DataLoader reads inside (ahead) are not
    counted, each batch handed over is; `_num_yielded` and len() as a DataLoader iterator has
    them, and the DataLoader it reads for the data facts."""

    def __init__(self, probe: Probe, gen: Any, loader: Any) -> None:
        self._probe, self._gen, self._num_yielded = probe, gen, 0
        self._portside_loader = getattr(loader, "base_dataloader", loader)
        self._source = loader

    def __iter__(self) -> _HandedOver:
        return self

    def __len__(self) -> int:
        return len(self._source)

    def __next__(self) -> Any:
        probe, me = self._probe, threading.get_ident()
        probe.feeders.add(me)  # the DataLoader's batches read in here: not counted there
        try:
            item = next(self._gen)
        finally:
            probe.feeders.discard(me)
        self._num_yielded += 1
        if self is not probe.cur_iter:
            probe.cur_iter = self
            probe.batch_samples = 0
        probe.batch_samples += _batch_len(item)
        return item


_SAVED: dict[type, list[str]] = {}  # autograd node class -> its saved inputs, "self" first


def _consumed(t: Any) -> int | None:
    """The batch a loss consumed: the leading dimension of the first input of its graph that
    has one (a loss function's input or target, a mean's operand), past the scalar arithmetic
    on top (`loss / k`, `a + b`). Read from what autograd saved: metadata, no device work."""
    fn = t.grad_fn
    for _ in range(8):
        if fn is None:
            return None
        names = _SAVED.get(type(fn))
        if names is None:
            names = [n for n in dir(fn) if n.startswith("_saved_")]
            names.sort(key=lambda n: (not n.startswith("_saved_self"), n))
            _SAVED[type(fn)] = names
        for name in names:
            try:
                v = getattr(fn, name)
            except Exception:
                continue
            if isinstance(v, tuple) and name.endswith("sizes"):
                if v and int(v[0]) > 0:
                    return int(v[0])
            elif getattr(v, "ndim", 0) and v.numel() > 1:  # a 1-element one is a scale
                return int(v.shape[0])
        nxt = fn.next_functions
        fn = next((f for f, _ in nxt if f is not None), None)
    return None


def _graph_leaves(t: Any) -> list[Any]:
    """The leaf tensors (parameters) a backward from t accumulates gradients into."""
    out: list[Any] = []
    seen: set[int] = set()
    # The nodes' Python wrappers may be made per access and freed at once (torch 2.9, as
    # torch_xla's venv has): kept alive here, or a freed one's id is reused and taken as seen.
    kept: list[Any] = []
    stack = [t.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        kept.append(fn)
        var = getattr(fn, "variable", None)
        if var is not None:
            out.append(var)
            continue
        stack.extend(nxt for nxt, _ in fn.next_functions)
    return out


def _param_sum(torch: Any, opt: Any) -> Any:
    """A cheap checksum of the stepped parameters (float64), to compare ranks."""
    params = [p for g in opt.param_groups for p in g["params"]]
    if not params or params[0].device.type == "xla":  # on XLA it would be a graph of its own
        return None
    with torch.no_grad():
        return torch.stack([p.detach().sum(dtype=torch.float64) for p in params]).sum()


def activate() -> Probe | None:
    """Start the probe in this process when PORTSIDE_PROBE_OUT is set; idempotent."""
    global _probe
    if _probe is not None:
        return _probe
    out = os.environ.get("PORTSIDE_PROBE_OUT")
    if not out:
        return None
    try:
        offset = int(os.environ.get("PORTSIDE_SEED_OFFSET") or 0)
    except ValueError:
        offset = 0
    _probe = Probe(os.path.abspath(out), offset)
    _probe.install()
    return _probe
