"""`portside scan`: before any port, what in a project will not move to a TPU as it is.

Static only: every Python file is read and parsed with `ast`, never imported or run, so a
project's own code (untrusted, possibly broken, possibly needing a GPU to import) cannot act
during a scan. Each finding names its file:line, the construct, and what a port must do.

Kinds (a stable vocabulary for `--json` and the agent's task):
  cuda-extension  compiled C++/CUDA extensions (CUDAExtension, load_inline, .cu files)
  custom-op       custom operators and kernels (torch.library, torch.ops.<ns>, triton, C++ ops)
  gpu-library     imports of GPU-only libraries (apex, flash_attn, bitsandbytes, xformers…)
  cuda-call       torch.cuda.*, .cuda(), a "cuda" device string
  cudnn-flag      torch.backends.cudnn.*
  collective      NCCL, DataParallel, DistributedDataParallel
  float64         float64 tensors (TPUs have no native float64)
  mixed-precision GradScaler, torch.cuda.amp
  recompile       data-dependent shapes and host syncs in the step: .item()/.tolist(), Python
                  branches on tensor values, nonzero/unique/masked_select, batches whose
                  length varies (pad_sequence, packed sequences, a DataLoader's short last batch)
  unparsed        a file that could not be read or parsed (the scan goes on without it)

Speed: a file whose bytes hold none of the trigger words is never parsed (most of a large tree);
directories that hold installed packages (virtual environments, site-packages), VCS metadata and
caches are not walked.
"""

from __future__ import annotations

import ast
import os
import re
import stat
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from portside.core.log import events as ev
from portside.core.scan.python_ast import parse

KINDS = ("cuda-extension", "custom-op", "gpu-library", "cuda-call", "cudnn-flag", "collective",
         "float64", "mixed-precision", "recompile", "unparsed")

_SKIP_DIRS = {"__pycache__", "node_modules", "site-packages", "dist-packages", "venv", "env",
              "build", "dist"}
_NATIVE = {".cu", ".cuh"}
_CXX = {".cpp", ".cc", ".cxx", ".h", ".hpp"}
MAX_BYTES = 4_000_000  # a bigger .py is generated or data: said so as unparsed, not parsed

# Every construct below needs one of these words in the file's bytes (names are qualified only
# through an import that spells them; step-only constructs need a step): a file without any is
# not parsed. Plain `in` on bytes, which is several times faster than one regex alternation.
_TRIGGERS = (b"cud", b"nccl", b"DataParallel", b"data_parallel", b"float64", b".double",
             b"cdouble", b"complex128", b"DoubleTensor", b"GradScaler", b"grad_scaler",
             b"autocast", b"triton", b"torch.library", b"import library", b"library import",
             b"torch.ops", b"import ops", b"load_library", b"cpp_extension", b"apex",
             b"flash_attn", b"bitsandbytes", b"xformers", b"cupy", b"nvidia", b"deepspeed",
             b"transformer_engine", b"pynvml", b"tensorrt", b"flashinfer", b"mamba_ssm",
             b"causal_conv1d", b"liger_kernel", b"DataLoader", b"pad_sequence", b"pack_",
             b".backward(", b".step(", b"def forward(")
_CXX_OP = re.compile(rb"TORCH_LIBRARY|torch/extension\.h|PYBIND11_MODULE|__global__")


@dataclass(frozen=True)
class Finding:
    path: str      # relative to the scanned folder, "/"-separated
    line: int
    kind: str      # one of KINDS
    what: str      # the construct as written (qualified where an import says what it is)
    action: str    # what a port must do about it


@dataclass
class ScanResult:
    root: str
    files: int = 0       # Python and native files looked at
    parsed: int = 0      # Python files parsed (the rest held no trigger word)
    seconds: float = 0.0
    findings: list[Finding] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        out = {k: 0 for k in KINDS}
        for f in self.findings:
            out[f.kind] += 1
        return {k: n for k, n in out.items() if n}

    def to_event(self, session_id: str) -> ev.ProjectScanned:
        return ev.ProjectScanned(
            session_id=session_id, root=self.root, files=self.files, parsed=self.parsed,
            seconds=self.seconds, counts=self.counts(), total=len(self.findings),
            findings=[ev.ScanFinding(**asdict(f)) for f in self.findings[:ev.MAX_SCAN_FINDINGS]])

    @classmethod
    def from_event(cls, e: ev.ProjectScanned) -> ScanResult:
        """The logged scan (a resumed session's agent gets the task it was given)."""
        return cls(e.root, e.files, e.parsed, e.seconds,
                   [Finding(f.path, f.line, f.kind, f.what, f.action) for f in e.findings])

    def to_json(self) -> dict[str, Any]:
        return {"root": self.root, "files": self.files, "parsed": self.parsed,
                "seconds": round(self.seconds, 3), "counts": self.counts(),
                "findings": [asdict(f) for f in self.findings]}


# --- what a port must do, one sentence per construct ------------------------------------------

_EXT = ("compiled extension: its kernels run on NVIDIA GPUs only; re-express them in PyTorch "
        "ops (or a Pallas kernel) before the port")
_OP = ("custom operator: XLA has no lowering for it; register an XLA implementation "
       "(torch.library impl for 'XLA') or rewrite it in PyTorch ops")
_TRITON = ("Triton kernel: GPU only; rewrite in PyTorch ops or as a Pallas kernel "
           "(torch_xla.experimental.custom_kernel)")
_CUDA = "CUDA-only API: use torch_xla (xm / torch.accelerator) or drop it on TPU"
_CUDA_DEV = ("a 'cuda' device: use the XLA device (torch_xla.device()) or "
             "torch.accelerator.current_accelerator()")
_DOT_CUDA = ".cuda() moves to an NVIDIA GPU: use .to(device) with the XLA device"
_CUDNN = ("cudnn flag: no effect off NVIDIA; for determinism use "
          "torch.use_deterministic_algorithms, drop benchmark flags")
_NCCL = "NCCL is NVIDIA's: on TPU init the process group with backend 'xla' (init_method 'xla://')"
_DP = ("DataParallel is single-process multi-GPU: use one process per device (torchrun/xmp.spawn) "
       "with DDP on the 'xla' backend, or SPMD")
_DDP = ("DDP: keep it on the 'xla' backend (init_method 'xla://'); drop device_ids and CUDA "
        "device placement")
_F64 = ("float64: TPUs have no native float64 (XLA emulates it slowly or it is demoted); use "
        "float32, or keep this on the host")
_AMP = ("CUDA mixed precision: on TPU autocast to bfloat16 (torch.autocast('xla', "
        "dtype=torch.bfloat16)); no GradScaler is needed")
_FP16 = ("float16 autocast: TPUs compute in bfloat16; autocast with dtype=torch.bfloat16 "
         "(and no GradScaler)")
_AUTOCASTS = {"torch.autocast", "torch.amp.autocast", "torch.cuda.amp.autocast"}
_ITEM = ("host sync in the step: on XLA it cuts the graph and waits each step; log a tensor every "
         "N steps instead")
_BRANCH = ("Python branch on a tensor value in the step: a host sync and one graph per outcome; "
           "use torch.where or move the test out of the step")
_DYN = ("data-dependent shape: a new shape each step means a new XLA compile; use a "
        "fixed-size form (masks, torch.where with 3 args, a size= argument)")
_PAD = ("pads to the batch's longest sequence: the shape changes batch to batch and XLA "
        "compiles each; pad to a fixed length or a few buckets")
_PACK = ("packed variable-length sequences: a new shape per batch; pad to a fixed length "
         "and mask instead")
_LAST = ("the last batch is shorter: one more compile for its shape (and again at eval); pass "
         "drop_last=True or pad it")

# Qualified-name rules, first match wins: a name matches a rule when it is the rule or starts
# with the rule plus a dot. Order matters where prefixes overlap (torch.cuda.amp before
# torch.cuda).
_NAME_RULES: tuple[tuple[str, str, str], ...] = (
    ("torch.cuda.amp", "mixed-precision", _AMP),
    ("torch.amp.GradScaler", "mixed-precision", _AMP),
    ("torch.amp.grad_scaler", "mixed-precision", _AMP),
    ("torch.GradScaler", "mixed-precision", _AMP),
    ("torch.cuda.nccl", "collective", _NCCL),
    ("torch.cuda", "cuda-call", _CUDA),
    ("torch.backends.cudnn", "cudnn-flag", _CUDNN),
    ("torch.backends.cuda", "cuda-call", _CUDA),
    ("torch.utils.cpp_extension", "cuda-extension", _EXT),
    ("torch.library", "custom-op", _OP),
    ("torch.ops.load_library", "custom-op", _OP),
    ("torch.classes.load_library", "custom-op", _OP),
    ("triton", "custom-op", _TRITON),
    ("torch.nn.DataParallel", "collective", _DP),
    ("torch.nn.parallel.DataParallel", "collective", _DP),
    ("torch.nn.parallel.data_parallel", "collective", _DP),
    ("torch.nn.DistributedDataParallel", "collective", _DDP),
    ("torch.nn.parallel.DistributedDataParallel", "collective", _DDP),
    ("torch.float64", "float64", _F64),
    ("torch.double", "float64", _F64),
    ("torch.complex128", "float64", _F64),
    ("torch.cdouble", "float64", _F64),
    ("torch.DoubleTensor", "float64", _F64),
    ("torch.nn.utils.rnn.pad_sequence", "recompile", _PAD),
    ("torch.nn.utils.rnn.pack_padded_sequence", "recompile", _PACK),
    ("torch.nn.utils.rnn.pack_sequence", "recompile", _PACK),
)
# torch.ops.<namespace>.<op>: these namespaces are PyTorch's own (lowered by XLA already).
_OWN_OPS = {"aten", "prim", "prims", "quantized", "xla", "profiler", "higher_order", "_c10d_functional",
            "c10d_functional", "_dtensor", "torchvision", "image", "load_library", "import_module"}

# Top-level package -> what a port does instead. Reported at the import.
_GPU_LIBS = {
    "apex": "NVIDIA apex (fused CUDA ops, apex.amp): use torch.optim / torch.autocast instead",
    "flash_attn": "flash-attn is CUDA kernels: use F.scaled_dot_product_attention "
                  "(or torch_xla's flash attention Pallas kernel)",
    "bitsandbytes": "bitsandbytes is CUDA-only (8-bit optimizers, 4-bit weights): use a "
                    "standard optimizer / bf16 weights on TPU",
    "xformers": "xformers' attention is CUDA kernels: use F.scaled_dot_product_attention",
    "cupy": "CuPy runs on NVIDIA GPUs: use torch ops (or NumPy on the host)",
    "nvidia": "NVIDIA library (e.g. DALI): use torch DataLoader / tf.data-style host pipelines",
    "deepspeed": "DeepSpeed's fused ops and ZeRO are CUDA/NCCL: use torch_xla FSDP or SPMD "
                 "sharding and torch.optim",
    "transformer_engine": "Transformer Engine is NVIDIA FP8 kernels: use bf16 on TPU",
    "pynvml": "NVML queries NVIDIA GPUs only: drop it or use torch_xla's device info",
    "pycuda": "PyCUDA is NVIDIA GPU only: rewrite in PyTorch ops",
    "tensorrt": "TensorRT is NVIDIA inference only: export through torch_xla / StableHLO instead",
    "torch_tensorrt": "Torch-TensorRT is NVIDIA only: drop it on TPU",
    "flashinfer": "FlashInfer is CUDA kernels: use F.scaled_dot_product_attention",
    "mamba_ssm": "mamba_ssm's selective scan is CUDA kernels: use a PyTorch reference scan",
    "causal_conv1d": "causal_conv1d is a CUDA kernel: use nn.Conv1d with left padding",
    "liger_kernel": "Liger kernels are Triton (GPU only): use the plain PyTorch modules",
    "triton": _TRITON,
}
_SYNC_METHODS = {"item", "tolist"}
_TRUTH_METHODS = {"item", "any", "all", "tolist"}
_TRUTH_FUNCS = {"torch.any", "torch.all", "torch.isnan", "torch.isinf", "torch.isfinite",
                "torch.equal", "torch.allclose", "torch.is_nonzero"}
_DYN_FUNCS = {"torch.nonzero", "torch.masked_select", "torch.unique", "torch.unique_consecutive",
              "torch.argwhere"}
_DYN_METHODS = {"nonzero", "masked_select", "unique", "unique_consecutive", "argwhere"}
_CUDA_STR = re.compile(r"cuda(:\d+)?$")


def _rule(name: str) -> tuple[str, str] | None:
    for prefix, kind, action in _NAME_RULES:
        if name == prefix or name.startswith(prefix + "."):
            return kind, action
    if name.startswith("torch.ops."):
        parts = name.split(".")
        if len(parts) >= 4 and parts[2] not in _OWN_OPS:
            return "custom-op", _OP
    return None


class _Visitor(ast.NodeVisitor):
    """One file's findings. Names are qualified through the file's own imports (`import
    torch.backends.cudnn as cudnn` makes `cudnn.benchmark` torch.backends.cudnn.benchmark)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.alias: dict[str, str] = {}
        self.found: dict[tuple[int, str, str], Finding] = {}
        self.step_depth = 0   # >0 inside a training step (see _is_step)
        self.in_branch: set[int] = set()  # .item() calls inside a test already reported

    def add(self, node: ast.AST, kind: str, what: str, action: str) -> None:
        line = getattr(node, "lineno", 1)
        self.found.setdefault((line, kind, what), Finding(self.path, line, kind, what, action))

    # --- imports: the names they bind, and GPU-only packages ----------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            top = a.name.split(".")[0]
            if a.asname:
                self.alias[a.asname] = a.name
            else:
                self.alias[top] = top
            self._library(node, a.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level or not node.module:
            return  # the project's own modules
        for a in node.names:
            if a.name != "*":
                self.alias[a.asname or a.name] = f"{node.module}.{a.name}"
        self._library(node, node.module)

    def _library(self, node: ast.AST, module: str) -> None:
        top = module.split(".")[0]
        action = _GPU_LIBS.get(top)
        if top == "nvidia" and not module.startswith("nvidia.dali"):
            action = None
        if top == "deepspeed" and module.startswith("deepspeed.ops"):
            action = "DeepSpeed ops are CUDA kernels (FusedAdam, fused attention): use torch.optim"
        if action:
            kind = "custom-op" if top == "triton" else "gpu-library"
            self.add(node, kind, f"import {module}", action)

    # --- names and attribute chains --------------------------------------------------------
    def qualify(self, node: ast.expr) -> str | None:
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in self.alias:
            return None
        return ".".join([self.alias[node.id], *reversed(parts)])

    def visit_Attribute(self, node: ast.Attribute) -> None:
        name = self.qualify(node)
        if name is not None:
            hit = _rule(name)
            if hit:
                self.add(node, hit[0], name, hit[1])
            return  # the chain is a name: its inner prefixes are not further findings
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        name = self.alias.get(node.id)
        if name and isinstance(node.ctx, ast.Load):
            hit = _rule(name)
            if hit:
                self.add(node, hit[0], name, hit[1])

    def visit_Constant(self, node: ast.Constant) -> None:
        if node.value == "nccl":
            self.add(node, "collective", "'nccl'", _NCCL)

    # --- calls: .cuda(), device strings, float64, syncs, shapes -----------------------------
    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = self.qualify(func)
        if isinstance(func, ast.Attribute) and name is None:
            self._method(node, func.attr)
        if name in _DYN_FUNCS and self.step_depth and not _sized(node):
            self.add(node, "recompile", f"{name}()", _DYN)
        if name == "torch.where" and len(node.args) == 1 and self.step_depth:
            self.add(node, "recompile", "torch.where(cond)", _DYN)
        if name in _AUTOCASTS and any(
                k.arg == "dtype" and self.qualify(k.value) in ("torch.float16", "torch.half")
                for k in node.keywords):
            self.add(node, "mixed-precision", "autocast(dtype=float16)", _FP16)
        if name is not None and name.split(".")[-1] == "DataLoader" and name.startswith("torch."):
            self._dataloader(node)
        for arg in _arg_values(node):
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                if _CUDA_STR.match(arg.value):
                    self.add(arg, "cuda-call", repr(arg.value), _CUDA_DEV)
                elif arg.value in ("float64", "double") and any(
                        k.arg == "dtype" and k.value is arg for k in node.keywords):
                    self.add(arg, "float64", f"dtype={arg.value!r}", _F64)
        self.generic_visit(node)

    def _method(self, node: ast.Call, attr: str) -> None:
        if attr == "cuda":
            self.add(node, "cuda-call", ".cuda()", _DOT_CUDA)
        elif attr == "double":
            self.add(node, "float64", ".double()", _F64)
        elif attr in _SYNC_METHODS and self.step_depth and id(node) not in self.in_branch:
            self.add(node, "recompile", f".{attr}()", _ITEM)
        elif attr in _DYN_METHODS and self.step_depth and not _sized(node):
            self.add(node, "recompile", f".{attr}()", _DYN)

    def _dataloader(self, node: ast.Call) -> None:
        kw = {k.arg: k.value for k in node.keywords}
        if None in kw or "batch_sampler" in kw:
            return  # **kwargs or a sampler of batches: the scan cannot tell, so says nothing
        drop = kw.get("drop_last")
        if not (isinstance(drop, ast.Constant) and drop.value is True):
            self.add(node, "recompile", "DataLoader without drop_last=True", _LAST)

    # --- the step: where syncs and branches on tensor values cost a compile ------------------
    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._scoped(node, node.name == "forward" or _calls_backward(node))

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_For(self, node: ast.For | ast.While | ast.AsyncFor) -> None:
        if isinstance(node, ast.While):
            self._branch(node.test)
        self._scoped(node, _calls_backward(node))

    visit_While = visit_For  # type: ignore[assignment]
    visit_AsyncFor = visit_For  # type: ignore[assignment]

    def _scoped(self, node: ast.AST, step: bool) -> None:
        self.step_depth += step
        try:
            self.generic_visit(node)
        finally:
            self.step_depth -= step

    def visit_If(self, node: ast.If) -> None:
        self._branch(node.test)
        self.generic_visit(node)

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self._branch(node.test)
        self.generic_visit(node)

    def _branch(self, test: ast.expr) -> None:
        if not self.step_depth:
            return
        for sub in ast.walk(test):
            if not isinstance(sub, ast.Call):
                continue
            f = sub.func
            if (isinstance(f, ast.Attribute) and f.attr in _TRUTH_METHODS
                    and self.qualify(f) is None) or self.qualify(f) in _TRUTH_FUNCS:
                self.add(test, "recompile", "branch on " + _short(test), _BRANCH)
                self.in_branch.update(id(n) for n in ast.walk(test))
                return


_NESTED = (ast.For, ast.AsyncFor, ast.While, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda,
           ast.ClassDef)


def _calls_backward(node: ast.AST) -> bool:
    """A loop or function that itself (not a loop or function inside it) calls .backward() or
    an optimizer's .step(): the step. An epoch loop around the step loop is not the step."""
    todo = list(ast.iter_child_nodes(node))
    while todo:
        sub = todo.pop()
        if isinstance(sub, _NESTED):
            continue
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) \
                and sub.func.attr in ("backward", "step") and _optimizer_like(sub.func):
            return True
        todo.extend(ast.iter_child_nodes(sub))
    return False


def _arg_values(node: ast.Call) -> Iterator[ast.expr]:
    """A call's arguments, and both sides of a conditional one (torch.device("cuda" if …))."""
    todo = [*node.args, *(k.value for k in node.keywords)]
    while todo:
        arg = todo.pop(0)
        if isinstance(arg, ast.IfExp):
            todo += [arg.body, arg.orelse]
        else:
            yield arg


def _sized(node: ast.Call) -> bool:
    return any(k.arg == "size" for k in node.keywords)  # nonzero(size=N) has a static shape


def _optimizer_like(func: ast.Attribute) -> bool:
    if func.attr == "backward":
        return True
    # .step() of an optimizer or a scaler, not of a scheduler (those run once an epoch)
    base = func.value
    label = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
    return "sched" not in label.lower()


def _short(node: ast.expr, width: int = 60) -> str:
    text = ast.unparse(node)
    return text if len(text) <= width else text[: width - 1] + "…"


def scan_python(path: str, source: bytes) -> list[Finding]:
    """One Python file's findings (path as it should be shown)."""
    try:
        tree = parse(source, filename=path)
    except (SyntaxError, ValueError) as e:
        line = getattr(e, "lineno", None) or 1
        return [Finding(path, line, "unparsed", "syntax error",
                        f"not scanned: {getattr(e, 'msg', e)}; fix it or scan again")]
    except (RecursionError, MemoryError, SystemError):  # nested deeper than the parser goes
        return [Finding(path, 1, "unparsed", "too deeply nested",
                        "not scanned: nested deeper than Python's parser goes")]
    v = _Visitor(path)
    try:
        v.visit(tree)
    except RecursionError:
        return [Finding(path, 1, "unparsed", "too deeply nested",
                        "not scanned: nested deeper than the scan walks")]
    return sorted(v.found.values(), key=lambda f: (f.line, f.kind, f.what))


def _native(path: str, data: bytes, suffix: str) -> list[Finding]:
    if suffix in _NATIVE:
        return [Finding(path, 1, "cuda-extension", f"CUDA source ({suffix})", _EXT)]
    m = _CXX_OP.search(data)
    if not m:
        return []
    line = data.count(b"\n", 0, m.start()) + 1
    what = m.group().decode()
    kind = "cuda-extension" if what == "__global__" else "custom-op"
    return [Finding(path, line, kind, f"C++ {what}", _EXT if kind == "cuda-extension" else _OP)]


def walk(root: Path) -> Iterator[Path]:
    """The project's files, not those of installed packages, caches or VCS metadata; links to
    folders not entered. A stack, not os.walk: 3.11's os.walk recurses, and a project nested a
    few thousand folders deep raised RecursionError out of the scan (issue 38.9)."""
    stack = [str(root)]
    while stack:
        dirpath = stack.pop()
        try:
            with os.scandir(dirpath) as it:
                entries = list(it)
        except OSError:  # unreadable, or past PATH_MAX: skipped, as os.walk did
            continue
        dirs, files = [], []
        for e in entries:
            try:
                is_dir = e.is_dir()
            except OSError:
                is_dir = False
            if not is_dir:
                files.append(e.name)
            elif not e.is_symlink():
                dirs.append(e.name)
        if dirpath != str(root) and "pyvenv.cfg" in files:
            continue
        for name in sorted(files):
            yield Path(dirpath, name)
        kept = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIP_DIRS)
        stack.extend(os.path.join(dirpath, d) for d in reversed(kept))


def _read_bounded(p: Path) -> bytes | None:
    """At most MAX_BYTES + 1 bytes of a regular file; None for anything else. Opened without
    following a link (scan runs as the user, root included: a project's link is never read
    through) and without blocking (a FIFO named `*.py` would hang open()), read to a bound."""
    fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return fh.read(MAX_BYTES + 1)


def _inside(p: Path, root: Path) -> bool:
    return os.path.realpath(p).startswith(str(root) + os.sep)


def scan(root: Path) -> ScanResult:
    """Every finding under root (a folder or one file), in path then line order."""
    t0 = time.perf_counter()
    root = root.resolve()
    result = ScanResult(str(root))
    files = [root] if root.is_file() else walk(root)
    base = root.parent if root.is_file() else root
    for p in files:
        suffix = p.suffix.lower()
        if suffix != ".py" and suffix not in _NATIVE and suffix not in _CXX:
            continue
        rel = p.relative_to(base).as_posix()
        if p != root and p.is_symlink():
            # A link to a project file is scanned where that file lies; one leading out of
            # the project (a host file, /dev/zero) is never read: said, not followed.
            if not _inside(p, root):
                result.files += 1
                result.findings.append(Finding(rel, 1, "unparsed", "a link out of the project",
                                               "not scanned: its target is outside the project"))
            continue
        result.files += 1
        try:
            data = _read_bounded(p)
        except OSError as e:
            result.findings.append(Finding(rel, 1, "unparsed", "unreadable",
                                           f"not scanned: {e.strerror or e}"))
            continue
        if data is None:
            result.findings.append(Finding(rel, 1, "unparsed", "not a regular file",
                                           "not scanned: a FIFO, a device or a folder"))
            continue
        if len(data) > MAX_BYTES:
            result.findings.append(Finding(rel, 1, "unparsed", "file too large",
                                           f"not scanned: over {MAX_BYTES} bytes"))
            continue
        if suffix != ".py":
            result.findings.extend(_native(rel, data, suffix))
        elif any(word in data for word in _TRIGGERS):
            result.parsed += 1
            result.findings.extend(scan_python(rel, data))
    result.seconds = time.perf_counter() - t0
    return result


def task_text(result: ScanResult, limit: int = 40) -> str:
    """The inventory as a paragraph of the agent's task: what to port, where."""
    if not result.findings:
        return "portside scan found nothing that needs porting beyond the device itself."
    lines = [f"portside scan found {len(result.findings)} place(s) that will not move to a TPU "
             "as they are (file:line kind: what; what to do):"]
    for f in result.findings[:limit]:
        lines.append(f"- {f.path}:{f.line} {f.kind}: {f.what}; {f.action}")
    if len(result.findings) > limit:
        lines.append(f"- … and {len(result.findings) - limit} more (run `portside scan`)")
    return "\n".join(lines)
