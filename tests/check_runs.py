"""Alarms from real check runs: hand-made step records (no process, no torch) judged by the real
checks (`run_checks`, `check_larger`), so a test or a golden file holds evidence exactly as the
checks write it, never a hand-written dict. `every_kind()` has one alarm of each kind: the
checks' own where a record can cause it, the session's builders for the kinds the session
raises (a claim, a budget, a failed reference, an edit, a tool outside the workspace)."""

from __future__ import annotations

from typing import Any

import numpy as np

from portside.core.checks import (
    Alarm,
    RunEnd,
    RunRecords,
    agent_claim_contradicted,
    budget_exhausted,
    run_checks,
)
from portside.core.checks.evidence import (
    EditMismatch,
    OutsideWorkspace,
    ReferenceFailed,
    ReferenceRun,
)
from portside.core.checks.larger import check_larger
from portside.core.log.criteria import DEFAULT_CRITERIA, Criteria, parse_criteria

OK = RunEnd(exit_code=0, wall_s=12.0)
CPU = {"type": "facts", "backend": "cpu", "device_kind": "CPU", "device_name": "cpu",
       "device_count": 1, "real_devices": ["CPU:0"], "pjrt_device": None}
N = 200  # steps a run


def _loss(seed: int, n: int = N, shift: float = 0.0, at: int = N // 2) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    loss = (2.3 * np.exp(-t / 60) + 0.2) * np.exp(0.05 * rng.standard_normal(n))
    loss[at:] += shift
    return loss


def _steps(loss: np.ndarray, **cols: Any) -> list[dict[str, Any]]:
    """Step records: `cols` a value for every step, an array (one a step) or a callable."""
    out = []
    for i, x in enumerate(loss):
        rec: dict[str, Any] = {"type": "step", "step": i, "loss": float(x), "grad_norm": 0.5,
                               "max_norm": None, "lr": [0.1], "step_s": 0.01, "compiles": None,
                               "compile_s": None}
        for k, v in cols.items():
            rec[k] = v(i) if callable(v) else (v[i] if isinstance(v, list | np.ndarray) else v)
        out.append(rec)
    return out


def _run(records: list[dict[str, Any]], end: RunEnd | None = OK,
         facts: dict[str, Any] | None = CPU, extra: list[dict[str, Any]] | None = None
         ) -> RunRecords:
    return RunRecords.from_records(([facts] if facts else []) + records + (extra or []), end=end)


def _crit(text: str) -> Criteria:
    return parse_criteria(text, "check_runs")


def _grad(i: int) -> float:
    return 0.5 + (i % 10 == 0)  # clipped at max_norm 1 one step in ten


GOAL = _crit('[goal]\nmetric = "accuracy"\ntolerance = 0.5\ndirection = "max"\n')


def clipping_port() -> list[Alarm]:
    """The study's silent failure: max_norm 1.0 ported as 0.05, the loss off the references'
    from mid-run and the accuracy 3 points down (three references)."""
    refs = [_run(_steps(_loss(s), max_norm=1.0, grad_norm=_grad),
                 extra=[{"type": "metric", "name": "accuracy", "value": 91.0 + 0.2 * s}])
            for s in (1, 2, 3)]
    cand = _run(_steps(_loss(4, shift=0.6), max_norm=0.05, grad_norm=_grad),
                extra=[{"type": "metric", "name": "accuracy", "value": 88.0}])
    return run_checks(refs, cand, GOAL, "cpu", final=True)


def schedule_port() -> list[Alarm]:
    """The lr halved; the step count and the per-epoch steps changed (drop_last)."""
    refs = [_run(_steps(_loss(s), lr=lambda i: [0.1], epoch=lambda i: i // 50, batch=lambda i: i % 50 + 1,
                        epoch_batches=50)) for s in (1, 2)]
    cand = _run(_steps(_loss(3, n=196), lr=lambda i: [0.05], epoch=lambda i: i // 49,
                       batch=lambda i: i % 49 + 1, epoch_batches=49))
    return run_checks(refs, cand, DEFAULT_CRITERIA, "cpu", final=True)


def settings_port() -> list[Alarm]:
    """Another optimizer setting, the shuffle off, bf16 autocast for fp16."""
    def facts(momentum: float, shuffle: bool, autocast: list[str]) -> dict[str, Any]:
        return {**CPU, "optimizers": [{"class": "SGD", "name": "opt", "modules": ["net"],
                                       "signature": "s" * 12, "index": 0,
                                       "groups": [{"settings": {"momentum": momentum,
                                                                "weight_decay": 0.0}}]}],
                "data": {"sampler": "RandomSampler" if shuffle else "SequentialSampler",
                         "shuffle": shuffle, "drop_last": False, "num_workers": 0,
                         "pin_memory": False, "dataset": "MNIST", "dataset_len": 60000},
                "precision": {"param_dtypes": ["torch.float32"], "autocast": autocast,
                              "default_dtype": "torch.float32", "matmul_precision": "highest",
                              "env": {}, "grad_scaler": autocast == ["cuda:torch.float16"]}}
    refs = [_run(_steps(_loss(s)), facts=facts(0.9, True, ["cuda:torch.float16"]))
            for s in (1, 2)]
    cand = _run(_steps(_loss(1)), facts=facts(0.5, False, ["xla:torch.bfloat16"]))
    return run_checks(refs, cand, DEFAULT_CRITERIA, "cpu", final=True)


def broken_run() -> list[Alarm]:
    """NaN from step 150, recompiles after warm-up, an op on the CPU, on the wrong hardware,
    slow, near out of memory."""
    loss = _loss(1)
    loss[150:] = np.nan
    cand = _run(_steps(loss, compiles=lambda i: 2 + (i >= 20) + (i >= 40) + (i >= 60),
                       compile_s=lambda i: 0.5 if i in (20, 40, 60) else 0.0, step_s=0.03),
                extra=[{"type": "exit", "compiles": 5,
                        "fallback_ops": {"aten::_cdist_forward": 2},
                        "device_peak_bytes": 15 * 2**30, "device_memory_bytes": 16 * 2**30}])
    ref = _run(_steps(_loss(2)))
    crit = _crit("[performance]\nmax_step_time_ratio = 2.0\nmax_memory_fraction = 0.9\n")
    return run_checks([ref], cand, crit, "tpu", final=True)


def ended_runs() -> list[Alarm]:
    """A crash with its cause in the tail, a stall, a time-out, an exit 0 without a step, steps
    without device facts."""
    tail = ("Traceback (most recent call last):",
            "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB")
    ends = [RunEnd(exit_code=1, error_type="RuntimeError", wall_s=3.0,
                   error_message="CUDA out of memory. Tried to allocate 2.00 GiB", tail=tail),
            RunEnd(exit_code=-15, signal=15, stalled=True, stall_s=120.0, wall_s=130.0),
            RunEnd(exit_code=-9, signal=9, timed_out=True, wall_s=600.0)]
    out = [a for end in ends for a in run_checks([], _run(_steps(_loss(1, n=5)), end=end),
                                                 DEFAULT_CRITERIA, "cpu", final=True)]
    out += run_checks([], _run([], facts=None), DEFAULT_CRITERIA, "cpu", final=True)
    return out + run_checks([], _run(_steps(_loss(1, n=5)), facts=None), DEFAULT_CRITERIA, "cpu",
                            final=True)


def data_parallel() -> list[Alarm]:
    """Ranks that never reduce; gradients summed over the ranks; the global batch halved with
    the same lr."""
    def ranked(world: int = 2, per_rank: int = 32, seed: int = 0, diverge: bool = False,
               scale: float = 1.0) -> RunRecords:
        rng = np.random.default_rng(seed)
        per_epoch = 1024 // (world * per_rank)
        out: list[dict[str, Any]] = [
            {**CPU, "rank": rank, "world_size": world, "param_devices": ["cpu"]}
            for rank in range(world)]
        noise = rng.standard_normal(4 * per_epoch)
        for k in range(4 * per_epoch):
            e, b = divmod(k, per_epoch)
            prog = e + (b + 1) / per_epoch
            for rank in range(world):
                rec = {"type": "step", "rank": rank, "step": k,
                       "loss": 2.3 * np.exp(-prog) + 0.1 + 0.01 * noise[k],
                       "grad_norm": scale * (1.0 + 0.3 * np.exp(-prog) + 0.01 * noise[k]),
                       "lr": [0.1], "epoch": e, "batch": b + 1, "epoch_batches": per_epoch,
                       "samples": per_rank, "step_s": 0.01}
                if k % 4 == 0:
                    rec["param_sum"] = 12.0 + 0.1 * k + (0.01 * k * rank if diverge else 0.0)
                out.append(rec)
        return RunRecords.from_records(out, OK)

    refs = [ranked(seed=s) for s in (0, 1, 2)]
    return [a for cand in (ranked(diverge=True, seed=5), ranked(scale=2.0, seed=5),
                           ranked(world=1, seed=5))
            for a in run_checks(refs, cand, DEFAULT_CRITERIA, "cpu", final=True)]


def larger_run() -> list[Alarm]:
    """The candidate at a larger batch: three times slower a step."""
    crit = _crit('[larger]\ncommand = "python train.py --batch {batch}"\nbatch = 256\n'
                 "max_step_time_ratio = 2.0\n")
    cand = _run(_steps(_loss(1, n=40)))
    big = _run(_steps(_loss(1, n=20), step_s=0.03))
    return check_larger(cand, big, crit)


def tampered() -> list[Alarm]:
    """Printed losses unlike the probe's where the references' agree."""
    def printed(r: RunRecords, off: float) -> RunRecords:
        r.integrity.printed["loss"] = [(int(s), float(x) + off)
                                       for s, x in zip(r.steps[:20], r.loss[:20], strict=True)]
        return r
    refs = [printed(_run(_steps(_loss(s))), 0.0) for s in (1, 2)]
    return run_checks(refs, printed(_run(_steps(_loss(3))), 1.0), DEFAULT_CRITERIA, "cpu",
                      final=True)


def session_alarms() -> list[Alarm]:
    """The kinds the session raises, through the builders it uses."""
    drift = next(a for a in clipping_port() if a.kind == "numeric-drift")
    return [
        agent_claim_contradicted("Done: the port matches the reference.", [drift],
                                 severity="critical", at="stop",
                                 open_alarms=[(drift.kind, drift.title)]),
        budget_exhausted("cost_usd", 5.25, 5.0),
        Alarm("reference-failed", "error", "reference run #1 did not train",
              ReferenceFailed(run="ref-1", exit_code=1, reason="crashed",
                              error_type="ImportError", error_message="no module named torch",
                              tail=["ImportError: no module named torch"])),
        Alarm("reference-failed", "error", "no valid reference run to judge the candidate against",
              ReferenceFailed(references=[ReferenceRun(run="ref-1", outcome="crashed", steps=0)]),
              key="reference-failed:none"),
        Alarm("edit-mismatch", "error", "train.py does not hold the approved text",
              EditMismatch(edit_id="e1", path="train.py")),
        Alarm("outside-workspace", "warning", "agent tried Read outside the workspace: /etc",
              OutsideWorkspace(tool="Read", path="/etc/passwd")),
    ]


SCENARIOS = (clipping_port, schedule_port, settings_port, broken_run, ended_runs,
             data_parallel, larger_run, tampered, session_alarms)


def every_alarm() -> list[Alarm]:
    return [a for scenario in SCENARIOS for a in scenario()]


def every_kind() -> dict[str, Alarm]:
    """The first alarm of each kind the scenarios raise."""
    out: dict[str, Alarm] = {}
    for a in every_alarm():
        out.setdefault(a.kind, a)
    return out


