"""The crash cause classifier's rules of precedence (the real failures, one per cause, run
through the CLI in tests/integration/test_crash_causes.py)."""

from __future__ import annotations

from portside.core.checks import Comparison, RunEnd, RunRecords
from portside.core.checks.crash_cause import classify
from portside.core.checks.runtime import check_end

WARNING = ("/x/torch/cuda/__init__.py:734: UserWarning: CUDA initialization: Found no NVIDIA "
           "driver on your system.")


def test_the_exception_outvotes_an_earlier_warning() -> None:
    tail = ["step=1 loss=1.0", WARNING, "Traceback (most recent call last):",
            '  File "train.py", line 3, in <module>', "KeyError: 'warmup'"]
    assert classify("KeyError", "'warmup'", tail) == ("unknown", "")
    tail[-1] = "ModuleNotFoundError: No module named 'apex'"
    assert classify("ModuleNotFoundError", "No module named 'apex'", tail) == (
        "missing-dependency", "ModuleNotFoundError: No module named 'apex'")


def test_a_line_naming_two_causes_is_the_first_in_order() -> None:
    # CUDA's own out-of-memory is memory, not a CUDA-only call
    assert classify("torch.OutOfMemoryError", "CUDA out of memory. Tried to allocate 2.00 GiB",
                    [])[0] == "out-of-memory"
    # a compiler that failed on an op it does not know is the compile that failed
    assert classify("torch._dynamo.exc.BackendCompilerFailed",
                    "backend='openxla' raised: NotImplementedError: aten::foo", [])[0] == \
        "compile-error"
    assert classify("RuntimeError", "RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran "
                    "out of memory in memory space hbm", [])[0] == "out-of-memory"


def test_the_cause_rides_on_the_crash_alarm_from_the_tail() -> None:
    end = RunEnd(exit_code=1, error_type="RuntimeError", error_message="",
                 tail=("Traceback (most recent call last):",
                       "RuntimeError: ",
                       "Python builtin <built-in function open> is currently not supported in "
                       "Torchscript:", "def step(x):"))
    cand = RunRecords.from_records([{"type": "step", "step": 0, "loss": 1.0}], end=end)
    (alarm,) = check_end(Comparison([], cand, final=True), None)  # type: ignore[arg-type]
    assert (alarm.kind, alarm.evidence.cause) == ("crashed", "compile-error")
    assert alarm.evidence.cause_line.startswith("Python builtin <built-in function open>")


def test_a_fused_optimizer_on_a_device_without_its_kernel_is_an_unsupported_op() -> None:
    # torch 2.9's message, as the HF Trainer's adamw_torch_fused on XLA raises it (issue 37)
    msg = ("`fused=True` requires all the params to be floating point Tensors of supported "
           "devices: ['mps', 'cuda', 'xpu', 'hpu', 'cpu', 'mtia', 'privateuseone'] but torch.float32 "
           "and xla")
    assert classify("RuntimeError", msg, []) == ("unsupported-op", f"RuntimeError: {msg}")
