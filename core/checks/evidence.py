"""An alarm's evidence, typed: one msgspec Struct per alarm kind (`EVIDENCE`).

The checks write these; the wire and the store keep the JSON they always had: `to_wire` is the
Struct as a plain dict (no tag, the same keys and values: NaN and ±inf as strings, numpy
unwrapped), and `read` turns any stored dict back into its kind's Struct.

Every field defaults to UNSET, "not recorded": a field the check did not set is left out of
the JSON (as the dicts left those keys out), and a key an older session or an imported export
lacks reads back as UNSET, never as a made-up value. Keys this version does not know, and
values of another type than the field's, are dropped on reading (`unknown` lists them, so a
reader can still show them: describe.py does).

Some kinds share a shape (the run's end: stalled, timed-out, crashed, no-metrics; the hardware
facts: wrong-hardware, unverified-hardware). A field named by a Python keyword carries a
trailing underscore and its JSON name (`class`, `from`, `global`).
"""

from __future__ import annotations

import math
from typing import Any, TypeAlias, TypeVar, get_args, get_origin

import msgspec
import numpy as np
from msgspec import UNSET, UnsetType, field

from portside.core.log import events as ev

__all__ = [
    "EVIDENCE", "UNSET", "AlarmRef", "BudgetExhausted", "Change", "ClaimContradicted",
    "ClipConfig", "ClipShare", "ClippingChanged", "CpuFallback", "DataChanged", "DriftRate",
    "EditMismatch", "Evidence", "EvidenceTampered", "GlobalBatch", "GlobalBatchChanged",
    "GoalRegression", "Hardware", "LrScheduleChanged", "Maybe", "MemoryPeak", "NonFinite",
    "NumericDrift", "OpenAlarm", "OptimizerChanged", "OutsideWorkspace", "PrecisionChanged",
    "RankAveragingChanged", "RanksDiverged", "Recompilation", "ReferenceFailed", "ReferenceRun",
    "RunEnded", "SettingsChanged", "Slow", "Spark", "StepCountDiffers", "TooFewReferences",
    "UnsetType", "jsonable", "likely_causes", "plain", "read", "to_wire", "unknown",
]

T = TypeVar("T")
#: A field that may be absent from the JSON (UNSET: not recorded).
Maybe: TypeAlias = T | UnsetType
Num: TypeAlias = int | float  # what a check wrote as it came (3 stays 3, 0.5 stays 0.5)


class Evidence(msgspec.Struct, frozen=True, kw_only=True):
    """The base of every kind's evidence; as itself, evidence with nothing recorded."""


# --- parts several kinds share ---------------------------------------------------------------


class Spark(Evidence, frozen=True, kw_only=True):
    """A series drawn by the card's chart: the candidate against a band (lo, hi) or a line."""
    steps: Maybe[list[Num]] = UNSET
    candidate: Maybe[list[Num]] = UNSET
    lo: Maybe[list[Num]] = UNSET
    hi: Maybe[list[Num]] = UNSET
    reference: Maybe[list[Num]] = UNSET


class ClipShare(Evidence, frozen=True, kw_only=True):
    """The clipped share of steps with the same clip configuration (on drift and goal alarms)."""
    candidate: Maybe[float] = UNSET
    reference: Maybe[float] = UNSET
    max_norm: Maybe[list[Num]] = UNSET
    differs: Maybe[bool] = UNSET


# --- consequences: what training did ---------------------------------------------------------


class DriftRate(Evidence, frozen=True, kw_only=True):
    """The drift test's stated false-alarm rate and how its threshold was found."""
    rule: Maybe[str] = UNSET
    alpha: Maybe[float | None] = UNSET
    alpha_series: Maybe[float] = UNSET
    alpha_test: Maybe[float] = UNSET
    series_judged: Maybe[int] = UNSET
    threshold_z: Maybe[float] = UNSET
    points: Maybe[int] = UNSET
    lag1_correlation: Maybe[float] = UNSET
    df: Maybe[Num] = UNSET
    kappa2: Maybe[float] = UNSET
    references: Maybe[int] = UNSET
    how: Maybe[str] = UNSET


class NumericDrift(Evidence, frozen=True, kw_only=True):
    series: Maybe[str] = UNSET
    test: Maybe[str] = UNSET  # "level": the mean over the second half (absent: an excursion)
    mean_z: Maybe[float] = UNSET
    threshold: Maybe[float] = UNSET
    first_step: Maybe[int] = UNSET
    alarm_step: Maybe[int] = UNSET
    worst_step: Maybe[int] = UNSET
    direction: Maybe[str] = UNSET
    steps_out: Maybe[int] = UNSET
    window: Maybe[int] = UNSET
    smooth: Maybe[int] = UNSET
    sample_gap: Maybe[int] = UNSET
    value_first: Maybe[float] = UNSET
    envelope_first: Maybe[list[float]] = UNSET
    value_worst: Maybe[float] = UNSET
    envelope_worst: Maybe[list[float]] = UNSET
    reference_runs: Maybe[int] = UNSET
    aligned_by: Maybe[str] = UNSET
    rate: Maybe[DriftRate] = UNSET
    spark: Maybe[Spark] = UNSET
    likely_causes: Maybe[list[str]] = UNSET  # causes.py
    clip_share: Maybe[ClipShare] = UNSET


class GoalRegression(Evidence, frozen=True, kw_only=True):
    """goal-regression by the test (acceptance.py) or by the practical rule (goal.py)."""
    metric: Maybe[str] = UNSET
    candidate: Maybe[float] = UNSET
    # goal.py: the references' values; acceptance.py: how many (the test's count wrote over
    # the values in the key's place)
    references: Maybe[list[float] | int] = UNSET
    mean: Maybe[float] = UNSET
    spread: Maybe[float] = UNSET
    tolerance: Maybe[float] = UNSET
    worse_by: Maybe[float] = UNSET
    direction: Maybe[str] = UNSET
    test: Maybe[str] = UNSET
    alpha: Maybe[float] = UNSET
    sd: Maybe[float] = UNSET
    df: Maybe[int] = UNSET
    p: Maybe[float | None] = UNSET
    t: Maybe[float] = UNSET
    interval: Maybe[list[float | None]] = UNSET
    detectable_half: Maybe[float] = UNSET
    detectable: Maybe[float] = UNSET
    rule: Maybe[str] = UNSET
    likely_causes: Maybe[list[str]] = UNSET
    clip_share: Maybe[ClipShare] = UNSET


class TooFewReferences(Evidence, frozen=True, kw_only=True):
    metric: Maybe[str] = UNSET
    references: Maybe[int] = UNSET
    sd: Maybe[float] = UNSET
    detectable: Maybe[float] = UNSET
    tolerance: Maybe[float] = UNSET
    alpha: Maybe[float] = UNSET
    power: Maybe[float] = UNSET
    references_needed: Maybe[int | None] = UNSET
    likely_causes: Maybe[list[str]] = UNSET
    clip_share: Maybe[ClipShare] = UNSET


# --- causes: settings and code the diff shows ------------------------------------------------


class ClipConfig(Evidence, frozen=True, kw_only=True):
    """One run's clipping as clipping-changed compares it."""
    steps: Maybe[int] = UNSET
    clip_steps: Maybe[int] = UNSET
    max_norm: Maybe[list[Num]] = UNSET
    uses_share: Maybe[Num] = UNSET
    clipped_share: Maybe[float | None] = UNSET
    judged: Maybe[int] = UNSET
    norm_type: Maybe[list[Num]] = UNSET
    clip_value: Maybe[list[Num]] = UNSET
    value_steps: Maybe[int] = UNSET
    clip_calls: Maybe[Num | None] = UNSET
    world_size: Maybe[int] = UNSET
    before_reduction: Maybe[Num | None] = UNSET
    rank_spread: Maybe[float | None] = UNSET


class ClippingChanged(Evidence, frozen=True, kw_only=True):
    candidate: Maybe[ClipConfig] = UNSET
    references: Maybe[list[ClipConfig]] = UNSET
    reason: Maybe[str] = UNSET  # what changed: max_norm, norm_type, stopped, before-reduction…


class GlobalBatch(Evidence, frozen=True, kw_only=True):
    """Samples per optimizer step over all ranks (records/facts.py global_batch)."""
    global_: Maybe[Num] = field(default=UNSET, name="global")
    world_size: Maybe[int] = UNSET
    per_rank: Maybe[Num] = UNSET
    from_: Maybe[str] = field(default=UNSET, name="from")


class LrScheduleChanged(Evidence, frozen=True, kw_only=True):
    first_step: Maybe[int] = UNSET
    group: Maybe[int] = UNSET
    candidate_lr: Maybe[float] = UNSET
    reference_lr: Maybe[float] = UNSET
    steps_differing: Maybe[int] = UNSET
    steps_compared: Maybe[int] = UNSET
    groups: Maybe[list[int]] = UNSET  # param groups: candidate, reference
    aligned_by: Maybe[str] = UNSET
    scheduler_steps: Maybe[list[Num]] = UNSET  # candidate, reference
    spark: Maybe[Spark] = UNSET
    # with another global batch (batch.py): the batches, and the lr factors they imply
    candidate_batch: Maybe[GlobalBatch] = UNSET
    reference_batch: Maybe[GlobalBatch] = UNSET
    batch_ratio: Maybe[float] = UNSET
    expected_lr_factor: Maybe[list[float]] = UNSET


class GlobalBatchChanged(Evidence, frozen=True, kw_only=True):
    candidate_batch: Maybe[GlobalBatch] = UNSET
    reference_batch: Maybe[GlobalBatch] = UNSET
    batch_ratio: Maybe[float] = UNSET
    lr: Maybe[float] = UNSET  # the same lr (error): it, and what the batch ratio expects
    expected_lr: Maybe[list[float]] = UNSET
    rule: Maybe[str] = UNSET  # a scaled lr (info): linear or sqrt, by this factor
    lr_factor: Maybe[float] = UNSET


class RankAveragingChanged(Evidence, frozen=True, kw_only=True):
    world_size: Maybe[int] = UNSET
    grad_norm_ratio: Maybe[float] = UNSET
    grad_norm_ratios: Maybe[list[float]] = UNSET
    loss_ratio: Maybe[float | None] = UNSET
    steps_compared: Maybe[int] = UNSET
    direction: Maybe[str] = UNSET  # summed | averaged-twice


class RanksDiverged(Evidence, frozen=True, kw_only=True):
    first_step: Maybe[int] = UNSET
    ranks: Maybe[list[int]] = UNSET
    param_sums: Maybe[dict[str, float]] = UNSET
    relative_spread: Maybe[float] = UNSET
    steps_checked: Maybe[int] = UNSET
    steps_diverged: Maybe[int] = UNSET
    world_size: Maybe[int] = UNSET


class Change(Evidence, frozen=True, kw_only=True):
    """One changed setting, candidate against reference (values as the probe recorded them)."""
    setting: Maybe[str] = UNSET
    candidate: Maybe[Any] = UNSET
    reference: Maybe[Any] = UNSET
    where: Maybe[str] = UNSET
    allowed: Maybe[bool] = UNSET  # allowed by a rule of its own (fp16 → bf16 autocast)
    step: Maybe[int] = UNSET  # changed during the run: the step it differs from…
    since: Maybe[Any] = UNSET
    from_: Maybe[Any] = field(default=UNSET, name="from")  # …and the value before


class SettingsChanged(Evidence, frozen=True, kw_only=True):
    """What the three settings alarms share (settings.py)."""
    changes: Maybe[list[Change]] = UNSET
    allowed: Maybe[bool] = UNSET  # every change allowed by the criteria: info


class OptimizerChanged(SettingsChanged, frozen=True, kw_only=True):
    optimizer: Maybe[str] = UNSET
    class_: Maybe[str | None] = field(default=UNSET, name="class")
    reference_class: Maybe[str | None] = UNSET


class DataChanged(SettingsChanged, frozen=True, kw_only=True):
    candidate_data: Maybe[dict[str, Any]] = UNSET
    reference_data: Maybe[dict[str, Any]] = UNSET


class PrecisionChanged(SettingsChanged, frozen=True, kw_only=True):
    candidate_grad_scaler: Maybe[Any] = UNSET
    reference_grad_scaler: Maybe[Any] = UNSET


# --- how the run ran and ended ---------------------------------------------------------------


class NonFinite(Evidence, frozen=True, kw_only=True):
    series: Maybe[str] = UNSET
    first_step: Maybe[int] = UNSET
    value: Maybe[float] = UNSET
    count: Maybe[int] = UNSET
    last_finite_step: Maybe[int | None] = UNSET
    last_finite_value: Maybe[float | None] = UNSET


class Hardware(Evidence, frozen=True, kw_only=True):
    """wrong-hardware and unverified-hardware: the target and the probe's device facts (only
    those the run recorded: runtime.FACT_KEYS), the devices the step computed on."""
    target: Maybe[str] = UNSET
    steps: Maybe[int] = UNSET  # no facts at all: the steps made without them
    backend: Maybe[Any] = UNSET
    device_kind: Maybe[Any] = UNSET
    device_name: Maybe[Any] = UNSET
    device_count: Maybe[Any] = UNSET
    real_devices: Maybe[Any] = UNSET
    pjrt_device: Maybe[Any] = UNSET
    world_size: Maybe[Any] = UNSET
    param_devices: Maybe[Any] = UNSET
    param_dtypes: Maybe[Any] = UNSET
    versions: Maybe[Any] = UNSET
    compute_devices: Maybe[Any] = UNSET
    compute_devices_how: Maybe[Any] = UNSET
    compute_scope: Maybe[Any] = UNSET
    compute_shardings: Maybe[Any] = UNSET
    rank_compute_devices: Maybe[dict[str, Any]] = UNSET
    rank_devices: Maybe[dict[str, Any]] = UNSET


class Recompilation(Evidence, frozen=True, kw_only=True):
    recompiles: Maybe[int] = UNSET
    steps: Maybe[list[Num]] = UNSET
    compiles: Maybe[list[Num]] = UNSET
    lr_around: Maybe[list[list[float]]] = UNSET  # compiles where the lr left or reached 0 or 1
    compile_s: Maybe[list[float]] = UNSET
    clean_steps_after: Maybe[int] = UNSET  # one burst, then none
    compile_s_total: Maybe[float] = UNSET
    warmup_steps: Maybe[int] = UNSET
    warmup_compiles: Maybe[int] = UNSET
    max_recompiles: Maybe[int] = UNSET
    after_training: Maybe[int] = UNSET  # compiles after the last training step
    last_step: Maybe[int] = UNSET
    exit_compiles: Maybe[Num] = UNSET
    causes: Maybe[list[Any]] = UNSET
    larger: Maybe[dict[str, Any]] = UNSET  # the larger-inputs run's variables (larger.py)


class CpuFallback(Evidence, frozen=True, kw_only=True):
    ops: Maybe[dict[str, Any]] = UNSET
    allowed: Maybe[list[str]] = UNSET
    all_fallback_ops: Maybe[dict[str, Any]] = UNSET
    larger: Maybe[dict[str, Any]] = UNSET


class Slow(Evidence, frozen=True, kw_only=True):
    """A steady step against the one it is held to: the candidate's against the references',
    or the larger run's against the candidate's."""
    larger_step_s: Maybe[float] = UNSET
    candidate_step_s: Maybe[float] = UNSET
    reference_step_s: Maybe[float] = UNSET
    ratio: Maybe[float] = UNSET
    limit: Maybe[Num] = UNSET
    warmup_steps: Maybe[int] = UNSET
    larger: Maybe[dict[str, Any]] = UNSET


class MemoryPeak(Evidence, frozen=True, kw_only=True):
    where: Maybe[str] = UNSET  # device | host
    peak_bytes: Maybe[Num | None] = UNSET
    limit_bytes: Maybe[Num | None] = UNSET
    fraction: Maybe[float | None] = UNSET
    host_rss_bytes: Maybe[Num | None] = UNSET
    limit: Maybe[Num] = UNSET
    larger: Maybe[dict[str, Any]] = UNSET


class RunEnded(Evidence, frozen=True, kw_only=True):
    """stalled, timed-out, crashed, no-metrics: how the run ended."""
    exit_code: Maybe[int | None] = UNSET
    signal: Maybe[int | None] = UNSET
    wall_s: Maybe[Num | None] = UNSET
    steps: Maybe[int] = UNSET
    last_step: Maybe[int | None] = UNSET
    stall_s: Maybe[Num | None] = UNSET  # stalled
    error_type: Maybe[str | None] = UNSET  # crashed
    error_message: Maybe[str] = UNSET
    cause: Maybe[str] = UNSET  # crash_cause.py's vocabulary
    cause_line: Maybe[str] = UNSET
    metric: Maybe[str] = UNSET  # no-metrics: the goal metric never reported
    larger: Maybe[dict[str, Any]] = UNSET


class EvidenceTampered(Evidence, frozen=True, kw_only=True):
    reason: Maybe[str] = UNSET  # seal | hardware | printed
    failed: Maybe[int] = UNSET  # seal: records that failed their check, the first few
    first: Maybe[list[Any]] = UNSET
    claimed: Maybe[dict[str, Any]] = UNSET  # hardware: the facts' claim, what was seen
    observed: Maybe[Any] = UNSET
    samples: Maybe[Any] = UNSET
    processes: Maybe[Any] = UNSET
    series: Maybe[str] = UNSET  # printed: a series printed unlike the probe's
    agreement: Maybe[float] = UNSET
    reference_agreement: Maybe[list[float | None]] = UNSET
    printed: Maybe[list[Any]] = UNSET


class StepCountDiffers(Evidence, frozen=True, kw_only=True):
    candidate_steps: Maybe[int] = UNSET
    reference_steps: Maybe[list[int]] = UNSET
    aligned_by: Maybe[str] = UNSET
    candidate_steps_per_epoch: Maybe[int | None] = UNSET
    reference_steps_per_epoch: Maybe[int | None] = UNSET
    candidate_batches_per_epoch: Maybe[float | None] = UNSET
    reference_batches_per_epoch: Maybe[float | None] = UNSET
    candidate_samples_per_step: Maybe[float | None] = UNSET
    reference_samples_per_step: Maybe[float | None] = UNSET
    candidate_world_size: Maybe[int] = UNSET
    reference_world_size: Maybe[int] = UNSET
    skipped: Maybe[list[float]] = UNSET  # GradScaler-skipped steps: candidate, reference


# --- the session's own alarms ----------------------------------------------------------------


class AlarmRef(Evidence, frozen=True, kw_only=True):
    kind: Maybe[str] = UNSET
    severity: Maybe[str] = UNSET
    title: Maybe[str] = UNSET
    key: Maybe[str] = UNSET


class OpenAlarm(Evidence, frozen=True, kw_only=True):
    check: Maybe[str] = UNSET
    title: Maybe[str] = UNSET


class ClaimContradicted(Evidence, frozen=True, kw_only=True):
    claim: Maybe[str] = UNSET
    reason: Maybe[str] = UNSET
    alarms: Maybe[list[AlarmRef]] = UNSET
    at: Maybe[str] = UNSET  # where the claim was judged: stop, Stop hook, an imported session
    open_alarms: Maybe[list[OpenAlarm]] = UNSET


class BudgetExhausted(Evidence, frozen=True, kw_only=True):
    what: Maybe[str] = UNSET  # attempts | cost_usd | human_minutes
    used: Maybe[Num] = UNSET
    limit: Maybe[Num] = UNSET


class ReferenceRun(Evidence, frozen=True, kw_only=True):
    run: Maybe[str] = UNSET
    outcome: Maybe[str] = UNSET
    steps: Maybe[int] = UNSET


class ReferenceFailed(Evidence, frozen=True, kw_only=True):
    run: Maybe[str] = UNSET  # one reference that did not train…
    exit_code: Maybe[int | None] = UNSET
    reason: Maybe[str] = UNSET
    error_type: Maybe[str | None] = UNSET
    error_message: Maybe[str] = UNSET
    tail: Maybe[list[str]] = UNSET
    references: Maybe[list[ReferenceRun]] = UNSET  # …or none valid: every reference


class EditMismatch(Evidence, frozen=True, kw_only=True):
    edit_id: Maybe[str] = UNSET
    path: Maybe[str] = UNSET


class OutsideWorkspace(Evidence, frozen=True, kw_only=True):
    tool: Maybe[str] = UNSET
    path: Maybe[str] = UNSET


#: Each alarm kind's evidence (a test holds it to ALARM_KINDS).
EVIDENCE: dict[str, type[Evidence]] = {
    "numeric-drift": NumericDrift,
    "goal-regression": GoalRegression,
    "clipping-changed": ClippingChanged,
    "lr-schedule-changed": LrScheduleChanged,
    "non-finite": NonFinite,
    "wrong-hardware": Hardware,
    "unverified-hardware": Hardware,
    "recompilation": Recompilation,
    "cpu-fallback": CpuFallback,
    "stalled": RunEnded,
    "timed-out": RunEnded,
    "crashed": RunEnded,
    "no-metrics": RunEnded,
    "slow": Slow,
    "agent-claim-contradicted": ClaimContradicted,
    "budget-exhausted": BudgetExhausted,
    "reference-failed": ReferenceFailed,
    "ranks-diverged": RanksDiverged,
    "step-count-differs": StepCountDiffers,
    "edit-mismatch": EditMismatch,
    "outside-workspace": OutsideWorkspace,
    "global-batch-changed": GlobalBatchChanged,
    "rank-averaging-changed": RankAveragingChanged,
    "evidence-tampered": EvidenceTampered,
    "memory-peak": MemoryPeak,
    "optimizer-changed": OptimizerChanged,
    "data-changed": DataChanged,
    "precision-changed": PrecisionChanged,
    "too-few-references": TooFewReferences,
}
assert set(EVIDENCE) == set(ev.ALARM_KINDS), set(EVIDENCE) ^ set(ev.ALARM_KINDS)


# --- to and from the wire --------------------------------------------------------------------


def jsonable(obj: Any) -> Any:
    """Plain JSON types only: numpy scalars/arrays unwrapped, NaN/±inf as strings."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [jsonable(v) for v in obj.tolist()]
    if isinstance(obj, np.bool_ | bool):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating | float):
        f = float(obj)
        if math.isnan(f):
            return "nan"
        if math.isinf(f):
            return "inf" if f > 0 else "-inf"
        return f
    return obj


def _numpy(obj: Any) -> Any:
    if isinstance(obj, np.generic | np.ndarray):
        return obj.tolist()
    raise NotImplementedError(f"evidence holds a {type(obj).__name__}")


def plain(v: Any) -> Any:
    """A value as plain data: Structs as dicts (UNSET fields left out), numpy unwrapped."""
    return msgspec.to_builtins(v, enc_hook=_numpy)


def to_wire(evidence: Evidence) -> dict[str, Any]:
    """The evidence as ``alarm.raised`` carries it and the store keeps it: a plain dict, its
    fields in their order, UNSET ones left out."""
    out = jsonable(plain(evidence))
    assert isinstance(out, dict)
    return out


def read(kind: str, stored: Any) -> Evidence:
    """Stored evidence (a dict from the log, the store or an imported export) as its kind's
    Struct: missing keys UNSET, unknown keys dropped, a value of the wrong type dropped with its
    key (evidence an older portside wrote otherwise). An unknown kind reads as bare Evidence."""
    return _read(EVIDENCE.get(kind, Evidence), stored)


E = TypeVar("E", bound=Evidence)


def _read(cls: type[E], stored: Any) -> E:
    if not isinstance(stored, dict):
        return cls()
    try:
        return msgspec.convert(stored, cls, strict=False)
    except msgspec.ValidationError:
        pass  # field by field: what reads is kept
    kept: dict[str, Any] = {}
    for f in msgspec.structs.fields(cls):
        if f.encode_name not in stored:
            continue
        value = stored[f.encode_name]
        try:
            kept[f.name] = msgspec.convert(value, f.type, strict=False)
            continue
        except msgspec.ValidationError:
            pass
        inner = _struct_in(f.type)  # a part (ClipConfig, Change…): read as tolerantly
        if inner is not None and isinstance(value, dict):
            kept[f.name] = _read(inner, value)
        elif inner is not None and isinstance(value, list) and _is_list_of(f.type, inner):
            kept[f.name] = [_read(inner, x) for x in value]
    return cls(**kept)


def _struct_in(tp: Any) -> type[Evidence] | None:
    """The Evidence Struct a field's type holds, directly or as a list's items."""
    for arg in (*get_args(tp), tp):
        if isinstance(arg, type) and issubclass(arg, Evidence):
            return arg
        if get_origin(arg) is list:
            item = get_args(arg)[0]
            if isinstance(item, type) and issubclass(item, Evidence):
                return item
    return None


def _is_list_of(tp: Any, item: type[Evidence]) -> bool:
    return any(get_origin(a) is list and get_args(a)[0] is item for a in (*get_args(tp), tp))


def unknown(kind: str, stored: Any) -> dict[str, Any]:
    """The keys of stored evidence that `read` does not take (an older or newer portside's: no
    field for them, or a value of another type), with their values."""
    if not isinstance(stored, dict):
        return {}
    typed = read(kind, stored)
    names = {f.encode_name for f in msgspec.structs.fields(typed)
             if getattr(typed, f.name) is not UNSET}
    return {k: v for k, v in stored.items() if k not in names}


def likely_causes(evidence: Evidence) -> list[str]:
    """The cause kinds a drift or goal alarm names (causes.py); [] for any other."""
    if isinstance(evidence, NumericDrift | GoalRegression | TooFewReferences) \
            and isinstance(evidence.likely_causes, list):
        return evidence.likely_causes
    return []
