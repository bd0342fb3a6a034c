"""The live checker's incremental records (core/checks/records/records_fold.py) against the full rebuild.

Ground truth: `RunRecords.from_records` on the whole stream so far (the implementation the live
checker used before, and the one every finished run still goes through). Property tests: random
record streams (ranks, epochs with drop_last-like step counts, missing fields, numeric strings,
non-finite strings, counter resets, odd ranks) fed in random chunk sizes give the same records,
field by field, after every chunk — and earlier snapshots stay equal to their prefix after later
chunks (they share the growing arrays) — and the same alarms, live and final.
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tiers import examples

from portside.core.checks import RunEnd, RunRecords, jsonable, run_checks
from portside.core.checks.clipping import rank_norm_spread
from portside.core.checks.records.records import EXTRA
from portside.core.checks.records.records_fold import IncrementalRecords
from portside.core.checks.records.series import rolling_mean, smoothed
from portside.core.checks.records.steps import index_of, intersect
from portside.core.log.criteria import DEFAULT_CRITERIA

OK = RunEnd(exit_code=0, wall_s=1.0)


def same(a: RunRecords, b: RunRecords, where: str = "run") -> None:
    for f in dataclasses.fields(RunRecords):
        if f.name == "derived":
            continue
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert isinstance(y, np.ndarray), f"{where}.{f.name}"
            assert (x.dtype, x.shape) == (y.dtype, y.shape), f"{where}.{f.name}"
            assert bits(x) == bits(y), f"{where}.{f.name}"  # -0.0 is not 0.0 (lossless)
        elif f.name == "extra":
            assert list(x) == list(y), f"{where}.extra keys"
            for k in EXTRA:  # the fold's carried answer against the rebuild's own
                assert a.has(k) == b.has(k), f"{where}.has({k})"
            for k in x:
                assert x[k].shape == y[k].shape and bits(x[k]) == bits(y[k]), \
                    f"{where}.extra[{k}]"
        elif f.name == "ranks":
            assert list(x) == list(y), f"{where}.ranks keys"
            for k in x:
                same(x[k], y[k], f"{where}.ranks[{k}]")
        else:  # repr: NaN-aware, and the order of keys counts
            assert repr(x) == repr(y), f"{where}.{f.name}"


def bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).tobytes()


def alarms_text(alarms: list) -> list[str]:
    return [json.dumps({"kind": a.kind, "key": a.key, "severity": a.severity, "title": a.title,
                        "evidence": jsonable(a.evidence)}, sort_keys=True, default=repr)
            for a in alarms]


def feed(records: list[dict], cuts: list[int], end: RunEnd | None = None,
         judge=None) -> None:
    """Feed records in chunks at `cuts`; after each chunk the snapshot equals the rebuild of
    the prefix (and judges the same); at the end every kept snapshot still does."""
    live = IncrementalRecords()
    kept: list[tuple[int, RunRecords]] = []
    bounds = sorted({c for c in cuts if 0 < c < len(records)}) + [len(records)]
    lo = 0
    for hi in bounds:
        live.add(records[lo:hi])
        lo = hi
        e = end if hi == len(records) else None
        snap = live.snapshot(e, "cand")
        full = RunRecords.from_records(records[:hi], e, "cand")
        same(snap, full)
        if judge is not None:
            assert alarms_text(judge(snap, e is not None)) == alarms_text(judge(full, e is not None))
        kept.append((hi, snap))
    for hi, snap in kept:
        same(snap, RunRecords.from_records(records[:hi], end if hi == len(records) else None,
                                           "cand"))


# --- random streams: every field form FORMAT.md allows, and some it does not --------------

numbers = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=64),
                    st.integers(-10**6, 10**6))
values = st.one_of(st.none(), numbers, st.sampled_from(["nan", "inf", "-inf", " NaN ", "1.5",
                                                        "-2", "1e-3", "abc", ""]),
                   st.floats(-1e3, 1e3).map(repr))
extra_values = st.one_of(st.none(), numbers, st.booleans(),
                         st.sampled_from(["nan", "inf", "2", "0.5", "x"]))
ranks = st.sampled_from([0, 0, 0, 1, 2, 3, None, "r", True, "absent"])
lrs = st.one_of(values, st.lists(values, max_size=3))


@st.composite
def step_record(draw: st.DrawFn, palette: list) -> dict:
    rec: dict = {"type": "step"}
    rank = draw(st.sampled_from(palette))
    if rank != "absent":
        rec["rank"] = rank
    how = draw(st.sampled_from(["int", "int", "str", "absent"]))
    if how != "absent":
        s = draw(st.integers(0, 50))
        rec["step"] = str(s) if how == "str" else s
    for key in ("loss", "grad_norm", "max_norm", "step_s", "compiles", "compile_s"):
        if draw(st.booleans()):
            rec[key] = draw(values)
    if draw(st.booleans()):
        rec["lr"] = draw(lrs)
    for key in draw(st.lists(st.sampled_from(EXTRA), max_size=4, unique=True)):
        rec[key] = draw(extra_values)
    return rec


other_record = st.one_of(
    st.fixed_dictionaries({"type": st.just("metric"), "name": st.sampled_from(["acc", "", "loss"]),
                           "value": values}),
    st.fixed_dictionaries({"type": st.just("facts"), "rank": ranks, "backend": st.just("cpu"),
                           "world_size": st.sampled_from([1, 2, 4]),
                           "n": st.integers(0, 9)}),
    st.fixed_dictionaries({"type": st.just("exit"), "rank": ranks, "compiles": values}),
    st.fixed_dictionaries({"type": st.sampled_from(["probe-error", "other"]),
                           "line": st.just("x")}),
    st.just({"no": "type"}),
)

@st.composite
def streams(draw: st.DrawFn) -> list[dict]:
    # The ranks one stream uses: some streams have no int rank at all (then every group is
    # joined, and a record without a step takes its place in the joined list).
    palette = draw(st.lists(ranks, min_size=1, max_size=3))
    steps = step_record(palette)
    return draw(st.lists(st.one_of(steps, steps, steps, other_record), max_size=60))


cuts = st.lists(st.integers(0, 60), max_size=8)


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(), cuts)
@example([{"type": "step", "rank": None, "step": 5}, {"type": "step", "rank": "r"},
          {"type": "step", "rank": None}], [1, 2])  # no int rank: positions in the joined list
@example([{"type": "step", "step": 0, "lr": []}, {"type": "step", "step": 1, "lr": []},
          {"type": "step", "step": 2, "lr": [0.1, None]}], [2])  # no lr group, then two
def test_random_streams_fold_to_the_rebuild(records: list[dict], at: list[int]) -> None:
    feed(records, at, OK)


@settings(max_examples=examples(150), deadline=None)
@given(streams(), cuts)
def test_random_streams_judge_the_same(records: list[dict], at: list[int]) -> None:
    ref = RunRecords.from_records([r for r in records if r.get("type") == "step"], OK, "ref")
    feed(records, at, OK, lambda c, final: run_checks(
        [ref], c, DEFAULT_CRITERIA, "cpu", final))


# --- realistic streams: ranks, epochs, drop_last, planted faults -------------------------


def training(seed: int, world: int, per_epoch: int, epochs: int, *, drift_at: int | None = None,
             lr_change: bool = False, clip: float | None = 1.0, nan_at: int | None = None,
             reset_at: int | None = None, bump: tuple[int, int] = (0, 0)) -> list[dict]:
    """A multi-rank run as the probe writes it: facts per rank, then the ranks' step records
    interleaved in bursts, output-parsed metrics, exit records."""
    rng = np.random.default_rng(seed)
    out: list[dict] = [{"type": "facts", "rank": r, "backend": "cpu", "device_kind": "CPU",
                        "device_name": "cpu", "device_count": 1, "world_size": world,
                        "param_devices": [f"cpu:{r}"]} for r in range(world)]
    n = per_epoch * epochs
    burst: list[dict] = []
    for k in range(n):
        e, b = divmod(k, per_epoch)
        loss = 2.0 * math.exp(-k / n * 3) + 0.1 + 0.02 * rng.standard_normal()
        if drift_at is not None and k >= drift_at or bump[0] <= k < bump[1]:
            loss *= 1.5
        gn = 0.8 + 0.3 * rng.random()
        step = k - reset_at if reset_at is not None and k >= reset_at else k
        for r in range(world):
            rec = {"type": "step", "rank": r, "step": step,
                   "loss": "nan" if nan_at == k else loss + 1e-3 * r,
                   "grad_norm": gn, "max_norm": clip, "lr": [0.1 * 0.5 ** (e if not lr_change
                                                                            else e + 1)],
                   "epoch": e, "batch": b + 1, "epoch_batches": per_epoch, "samples": 32,
                   "step_s": 0.01, "compiles": 2 if k else 1, "compile_s": 0.0,
                   "param_sum": 100.0 + k * 1e-3 if k % 5 == 0 else None, "clip_calls": 1,
                   "clip_reduced": True}
            if rng.random() < 0.05:
                del rec["grad_norm"]  # a missing field
            if rng.random() < 0.05:
                rec["loss"] = str(rec["loss"])  # a numeric string
            burst.append(rec)
        if rng.random() < 0.3 or k == n - 1:
            # ranks' files are read in any order within a poll; each rank's in its order
            order = [rec["rank"] for rec in burst]
            rng.shuffle(order)
            per = {r: iter([x for x in burst if x["rank"] == r]) for r in range(world)}
            out += [next(per[r]) for r in order]
            burst = []
        if b == per_epoch - 1:
            out.append({"type": "metric", "name": "accuracy", "value": 90 + rng.random(),
                        "source": "output"})
    out += [{"type": "exit", "rank": r, "compiles": 2} for r in range(world)]
    return out


REFS = [RunRecords.from_records(training(s, 4, 63, 6), OK, f"ref{s}") for s in (1, 2)]


@settings(max_examples=examples(40), deadline=None)
@given(seed=st.integers(0, 10**6), per_epoch=st.sampled_from([62, 63]),
       world=st.sampled_from([1, 2, 4]),
       fault=st.sampled_from([None, "drift", "lr", "clip", "nan", "reset"]),
       at=st.lists(st.integers(0, 6 * 63 * 4), max_size=12))
def test_training_streams_judge_the_same(seed: int, per_epoch: int, world: int,
                                         fault: str | None, at: list[int]) -> None:
    recs = training(seed, world, per_epoch, 6, drift_at=200 if fault == "drift" else None,
                    lr_change=fault == "lr", clip=0.05 if fault == "clip" else 1.0,
                    nan_at=300 if fault == "nan" else None,
                    reset_at=150 if fault == "reset" else None)
    feed(recs, at, OK, lambda c, final: run_checks(REFS, c, DEFAULT_CRITERIA, "cpu", final))


@pytest.mark.parametrize("fault, kind", [("drift", "numeric-drift"), ("lr", "lr-schedule-changed"),
                                         ("clip", "clipping-changed"), ("nan", "non-finite")])
def test_training_faults_are_found_live(fault: str, kind: str) -> None:
    # The equality tests above would pass on a fold that sees nothing: the planted faults are
    # raised from the live snapshots too, before the run ends.
    recs = training(7, 4, 62, 6, drift_at=200 if fault == "drift" else None,
                    lr_change=fault == "lr", clip=0.05 if fault == "clip" else 1.0,
                    nan_at=300 if fault == "nan" else None)
    live = IncrementalRecords()
    seen: set[str] = set()
    for i in range(0, len(recs) - 8, 97):
        live.add(recs[i:i + 97])
        seen |= {a.kind for a in run_checks(REFS, live.snapshot(None, "c"), DEFAULT_CRITERIA,
                                            "cpu", False)}
    assert kind in seen


def test_snapshot_arrays_are_read_only_views() -> None:
    live = IncrementalRecords()
    live.add(training(3, 2, 10, 1))
    snap = live.snapshot()
    with pytest.raises(ValueError):
        snap.loss[0] = 1.0
    live.add(training(4, 2, 10, 3))  # grows past the first capacity: the old views hold
    same(snap, RunRecords.from_records(training(3, 2, 10, 1)))


def test_parse_error_raises_like_the_rebuild_and_adds_nothing() -> None:
    bad = [{"type": "step", "step": 0, "loss": 1.0}, {"type": "step", "step": "1.5"}]
    with pytest.raises(ValueError):
        RunRecords.from_records(bad)
    live = IncrementalRecords()
    with pytest.raises(ValueError):
        live.add(bad)
    assert live.snapshot().n == 0


# --- the checks' step intersection (core/checks/records/steps.py) against np.intersect1d -----------

step_arrays = st.one_of(
    st.lists(st.integers(0, 40), max_size=40).map(lambda v: np.array(v, np.int64)),
    st.lists(st.integers(0, 40), max_size=40, unique=True).map(
        lambda v: np.array(sorted(v), np.int64)))


@settings(max_examples=examples(300), deadline=None)
@given(step_arrays, step_arrays)
def test_intersect_is_intersect1d(a: np.ndarray, b: np.ndarray) -> None:
    want, _, ib = np.intersect1d(a, b, return_indices=True)
    got = intersect(a, b)
    assert got.dtype == want.dtype and np.array_equal(got, want)
    assert np.array_equal(index_of(want, b), ib)


@settings(max_examples=examples(200), deadline=None)
@given(st.integers(0, 10**6), st.integers(2, 4), st.sampled_from(["same", "ahead", "gaps"]),
       st.booleans())
def test_rank_spread_is_its_definition(seed: int, world: int, shape: str, holes: bool) -> None:
    # Ground truth by brute force: the median, over steps every rank has with a known clip,
    # of (max - min) / max|norm| across ranks. Shapes: every rank the same steps (the fast
    # path), some ranks ahead (live: the fast path on a prefix), steps missing (the general).
    rng = np.random.default_rng(seed)
    runs, by_step = {}, []
    for r in range(world):
        n = 40 + (int(rng.integers(0, 6)) if shape == "ahead" else 0)
        steps = np.arange(n)
        if shape == "gaps":
            steps = np.sort(rng.choice(60, size=40, replace=False))
        gn = rng.random(steps.size) + 0.1
        mn = np.where(rng.random(steps.size) < 0.2, np.nan, 1.0) if holes else np.ones(steps.size)
        runs[r] = RunRecords.from_arrays(steps=steps, grad_norm=gn, max_norm=mn)
        by_step.append({int(k): g for k, g, m in zip(steps, gn, mn, strict=True) if m == m})
    common = sorted(set.intersection(*(set(d) for d in by_step)))
    rec = RunRecords.from_arrays(loss=np.zeros(3))
    rec.ranks = runs
    got = rank_norm_spread(rec)
    if not common:
        assert got is None
        return
    vals = [(max(d[k] for d in by_step) - min(d[k] for d in by_step))
            / max(abs(d[k]) for d in by_step) for k in common]
    assert got == pytest.approx(float(np.median(vals)), rel=1e-12)


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.one_of(st.floats(-1e6, 1e6), st.just(math.nan), st.just(math.inf),
                          st.just(-0.0)), max_size=80),
       st.lists(st.integers(1, 80), max_size=6), st.integers(1, 12))
def test_carried_smoothing_is_rolling_mean_to_the_bit(xs: list[float], at: list[int],
                                                      w: int) -> None:
    live = IncrementalRecords()
    recs = [{"type": "step", "step": i, "loss": v} for i, v in enumerate(xs)]
    lo = 0
    for hi in sorted({c for c in at if c < len(recs)}) + [len(recs)]:
        live.add(recs[lo:hi])
        lo = hi
        snap = live.snapshot()
        got, want = smoothed(snap, "loss", w), rolling_mean(snap.loss, w)
        assert got.tobytes() == want.tobytes()  # the same bits, -0.0 and NaN included


def test_a_short_excursion_cut_by_a_pass_is_still_found() -> None:
    # 35 steps out (window 20), the records cut in its middle: neither half is a window, the
    # whole is. Ground truth: the rebuild of the same prefix.
    recs = training(11, 1, 63, 6, bump=(250, 285))
    cut = next(i for i, r in enumerate(recs) if r.get("step") == 268)
    judge = lambda c, final: run_checks(REFS1, c, DEFAULT_CRITERIA, "cpu", final)  # noqa: E731
    feed(recs, [cut - 200, cut, cut + 8], OK, judge)
    live = IncrementalRecords()
    for lo, hi in ((0, cut), (cut, cut + 30)):
        live.add(recs[lo:hi])
        kinds = {a.kind for a in judge(live.snapshot(None, "c"), False)}
    assert "numeric-drift" in kinds


REFS1 = [RunRecords.from_records(training(s, 1, 63, 6), OK, f"ref{s}") for s in (1, 2)]


@settings(max_examples=examples(30), deadline=None)
@given(st.integers(0, 10**6), st.sampled_from([2, 4]),
       st.lists(st.integers(0, 6 * 30 * 4), max_size=8), st.booleans())
def test_carried_rank_spread_is_the_rebuilt_one(seed: int, world: int, at: list[int],
                                                 reset: bool) -> None:
    recs = training(seed, world, 30, 6, reset_at=70 if reset else None)
    rng = np.random.default_rng(seed)
    for rec in recs:  # ranks' own clip norms (clipping before the reduction), some unknown
        if rec.get("type") == "step" and "grad_norm" in rec:
            rec["grad_norm"] *= 1 + 0.01 * rng.random()
    live = IncrementalRecords()
    lo = 0
    for hi in sorted({c for c in at if 0 < c < len(recs)}) + [len(recs)]:
        live.add(recs[lo:hi])
        lo = hi
        got = rank_norm_spread(live.snapshot())
        want = rank_norm_spread(RunRecords.from_records(recs[:hi]))
        assert repr(got) == repr(want)  # None, NaN and floats alike


# --- facts the checks carry from pass to pass (core/checks/records/carry.py) -----------------------


def facts_of(c: RunRecords, refs: list[RunRecords]) -> str:
    """Every carried fact of a candidate (and of the references cut at its last step), as
    text: None, NaN, -0.0 and the order of keys all count."""
    from portside.core.checks.clipping import clip_config as config
    from portside.core.checks.records.comparison import Pairing

    def clip_config(r: RunRecords) -> dict:  # rank_spread: added when an alarm is built
        return {k: v for k, v in config(r).items() if k != "rank_spread"}
    from portside.core.checks.drift import _gap
    from portside.core.checks.lr import _lr_by_step
    from portside.core.checks.ranks import _rank_divergence, norm_ratio
    from portside.core.checks.records.facts import steps_per_epoch
    from portside.core.checks.slow import steady_step_s
    out: list = [div_text(_rank_divergence(c)), rank_norm_spread(c), c.steps_increasing(), {k: x.steps_increasing() for k, x in c.ranks.items()},
                 steps_per_epoch(c), steps_per_epoch(c, attempted=True), clip_config(c),
                 {k: clip_config(x) for k, x in c.ranks.items()},
                 [_gap(c, s) for s in ("loss", "grad_norm")],
                 [steady_step_s(c, w) for w in (0, 3)]]
    for i, r in enumerate(refs):
        p = Pairing(c, r, i)
        out += [_lr_by_step(p), norm_ratio(p) if c.n else None]
        if c.n:
            out.append(clip_config(r.upto(int(c.steps.max()))))
    return repr(out)


def div_text(d: dict | None) -> object:
    return None if d is None else {"steps": d["steps"].tolist(), "spread": d["spread"].tolist(),
                                   "sums": {k: v.tolist() for k, v in d["sums"].items()}}


def facts_feed(records: list[dict], at: list[int], refs: list[RunRecords]) -> None:
    """After each chunk the snapshot's facts are the rebuild's; snapshots not asked until the
    end (their state is behind the kept one then) still give their own prefix's facts."""
    live = IncrementalRecords()
    later: list[tuple[int, RunRecords]] = []
    lo = 0
    bounds = sorted({c for c in at if 0 < c < len(records)}) + [len(records)]
    for i, hi in enumerate(bounds):
        live.add(records[lo:hi])
        lo = hi
        snap = live.snapshot(None, "cand")
        if i % 3 == 1:
            later.append((hi, snap))
            continue
        full = RunRecords.from_records(records[:hi])
        assert facts_of(snap, refs) == facts_of(full, refs) == defined_facts(full, refs), hi
    for hi, snap in later:
        full = RunRecords.from_records(records[:hi])
        assert facts_of(snap, refs) == defined_facts(full, refs), hi


def cut_refs(records: list[dict]) -> list[RunRecords]:
    return [RunRecords.from_records([r for r in records if r.get("type") == "step"], OK, "ref")]


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(), cuts)
def test_random_streams_carry_the_rebuilt_facts(records: list[dict], at: list[int]) -> None:
    facts_feed(records, at, cut_refs(records[::-1]))


@settings(max_examples=examples(30), deadline=None)
@given(seed=st.integers(0, 10**6), per_epoch=st.sampled_from([62, 63]),
       world=st.sampled_from([1, 2, 4]),
       fault=st.sampled_from([None, "lr", "lr_late", "clip", "reset", "thin", "local",
                              "sums"]),
       at=st.lists(st.integers(0, 6 * 63 * 4), max_size=10))
@example(seed=1, per_epoch=62, world=2, fault="sums", at=[700, 1300])  # every fault, always
@example(seed=7, per_epoch=62, world=4, fault="sums", at=[900])
@example(seed=2, per_epoch=63, world=2, fault="local", at=[500, 900])
@example(seed=3, per_epoch=62, world=4, fault="reset", at=[300, 800])
@example(seed=4, per_epoch=63, world=2, fault="thin", at=[400])
@example(seed=5, per_epoch=62, world=4, fault="clip", at=[650])
@example(seed=6, per_epoch=63, world=4, fault="lr", at=[1000])
@example(seed=8, per_epoch=63, world=2, fault="lr_late", at=[100, 300, 900])
@example(seed=9, per_epoch=62, world=2, fault="local", at=[100, 600])
def test_training_streams_carry_the_rebuilt_facts(seed: int, per_epoch: int, world: int,
                                                  fault: str | None, at: list[int]) -> None:
    recs = training(seed, world, per_epoch, 6, lr_change=fault == "lr",
                    clip=0.05 if fault == "clip" else 1.0,
                    reset_at=150 if fault == "reset" else None)
    rng = np.random.default_rng(seed)
    for rec in recs:
        if rec.get("type") == "step":
            if fault == "thin" and rec["step"] % int(rng.integers(3, 6)):
                rec.pop("grad_norm", None)  # a thinned gradient norm: spacings vary
            rec["clip_calls"] = int(rng.integers(1, 4))  # a median of many counts
            rec["skipped"] = int(rng.random() < 0.1)
            rec["step_s"] = float(rng.choice([0.01, 0.011, 0.02, rng.random()]))
            rec["compile_s"] = 0.5 if rng.random() < 0.02 else 0.0
            if fault == "local" and rec["rank"] and "grad_norm" in rec and rng.random() < 0.6:
                rec["grad_norm"] *= 1.01  # ranks' own clip norms on some steps
                rec["clip_reduced"] = False
            if fault == "lr_late" and rec["step"] >= 200:  # first differs in a later chunk
                rec["lr"] = [2 * x for x in rec["lr"]]
            if fault == "sums":  # checksums on other steps per rank, drifting apart
                rec["param_sum"] = (100.0 + rec["step"] * 1e-3 * (1 + rec["rank"])
                                    if rec["step"] % (2 + rec["rank"]) == 0 else None)
    facts_feed(recs, at, REFS)


def test_ranks_that_agree_share_their_columns() -> None:
    # Memory (records_fold._Cell): data-parallel ranks log the same epoch, batch, lr and
    # checksums, their own loss; arriving in any order (rank 1 ahead of rank 0, behind it),
    # the columns they agree on stay shared, the loss forks; every rank reads its own rows.
    recs = training(5, 4, 30, 4)
    live = IncrementalRecords()
    for i in range(0, len(recs), 37):
        live.add(recs[i:i + 37])
    for rank in range(4):
        cells = live.by_rank[rank]
        assert all(cells.extra[k].shared for k in ("epoch", "batch", "epoch_batches",
                                                   "param_sum", "samples"))
        assert cells.lr_all.shared
    # the losses differ: at most one rank (the first to write each row) keeps the common one
    assert sum(live.by_rank[r].cols["loss"].shared for r in range(4)) <= 1
    same(live.snapshot(OK, "cand"), RunRecords.from_records(recs, OK, "cand"))


def test_a_rank_behind_forks_where_its_own_rows_differ() -> None:
    # Rank 0 writes 1,1,1,2,2,2 first; rank 1 then 1,1,1 (the common rows) and 1,1,1: those
    # differ from the common rows 3..5 (not from rows 0..2), so rank 1 must fork there.
    live = IncrementalRecords()
    rows = [(0, [1.0, 1.0, 1.0, 2.0, 2.0, 2.0]), (1, [1.0, 1.0, 1.0]), (1, [1.0, 1.0, 1.0])]
    recs: list[dict] = []
    seen = {0: 0, 1: 0}
    for rank, vals in rows:
        chunk = []
        for v in vals:
            chunk.append({"type": "step", "rank": rank, "step": seen[rank], "loss": v})
            seen[rank] += 1
        live.add(chunk)
        recs += chunk
    same(live.snapshot(), RunRecords.from_records(recs))
    assert live.snapshot().ranks[1].loss.tolist() == [1.0] * 6


def test_a_counter_reset_on_the_first_rank_keeps_the_ranks_aligned() -> None:
    # Rank 0 repeats steps after a reset: the common steps of the ranks' clip norms must be
    # unique, or the ranks' rows no longer line up (raised ValueError from np.vstack before).
    recs = training(1, 2, 62, 6, reset_at=150)
    assert rank_norm_spread(RunRecords.from_records(recs[:305])) == 0.0


# Ground truth from outside the folds: each carried fact as it was defined before it was
# carried (core/checks at 738ebdf), computed over the whole rebuilt run.


def defined_facts(c: RunRecords, refs: list[RunRecords]) -> str:
    from portside.core.checks.lr import LR_RTOL, _lr_evidence
    from portside.core.checks.ranks import AVG_EARLY
    from portside.core.checks.records.alignment import aligned, by_progress, map_to
    from portside.core.checks.records.facts import has_progress
    from portside.core.checks.records.series import common_steps

    def increasing(x: RunRecords) -> bool:
        return x.steps.size < 2 or bool((x.steps[1:] > x.steps[:-1]).all())

    def per_epoch(r: RunRecords, attempted: bool = False) -> dict:
        if not has_progress(r):
            return {}
        ep = r.col("epoch").astype(np.int64)
        w = np.nan_to_num(r.col("skipped")) + 1 if attempted else None
        if ep.size and bool((ep[1:] >= ep[:-1]).all()):
            starts = np.flatnonzero(np.concatenate(([True], ep[1:] != ep[:-1])))
            uniq = ep[starts]
            counts = (np.diff(np.append(starts, ep.size)).astype(np.float64) if w is None
                      else np.add.reduceat(w, starts))
        else:
            uniq, inv = np.unique(ep, return_inverse=True)
            counts = np.bincount(inv, weights=w)
        return {int(e): int(round(c)) for e, c in zip(uniq, counts, strict=True)}

    def clip(r: RunRecords) -> dict:
        mn, gn = r.max_norm, r.grad_norm
        used = np.isfinite(mn)
        n_used = int(used.sum())
        mv = mn[used]
        with np.errstate(invalid="ignore"):
            j = used & np.isfinite(gn)
            clipped = int(np.count_nonzero(j & (gn > mn)))
        judged = int(j.sum())
        if n_used and mv.min() == mv.max():
            values = mv[:1]
        else:
            values = np.unique(np.round(mv, 9)) if n_used else np.zeros(0)
        nt = r.col("norm_type")[used]
        nt = np.where(np.isfinite(nt) | np.isinf(nt), nt, 2.0)
        cv = r.col("clip_value")
        cv = cv[np.isfinite(cv)]
        calls = r.col("clip_calls")
        calls = calls[used & np.isfinite(calls)]
        red = r.col("clip_reduced")
        red = red[np.isfinite(red)]
        return {"steps": r.n, "clip_steps": n_used, "max_norm": values[:8].tolist(),
                "uses_share": n_used / r.n if r.n else 0.0,
                "clipped_share": clipped / judged if judged else None, "judged": judged,
                "norm_type": np.unique(nt)[:4].tolist(),
                "clip_value": np.unique(np.round(cv, 9))[:4].tolist(),
                "value_steps": int(cv.size),
                "clip_calls": float(np.median(calls)) if calls.size else None,
                "world_size": r.world_size,
                "before_reduction": (float(np.mean(red == 0)) if red.size else None)}

    def gap(r: RunRecords, name: str) -> int:
        fin = np.isfinite(r.series(name))
        at = np.flatnonzero(fin)
        g = 1 if fin.all() else (int(np.median(np.diff(at))) if at.size >= 2 else 1)
        return max(g, 1)

    def steady(r: RunRecords, w: int) -> float | None:
        keep = r.steps >= w
        v, cs = r.step_s[keep], r.compile_s[keep]
        ok = np.isfinite(v)
        if (ok & ~(cs > 0)).any():
            ok &= ~(cs > 0)
        return float(np.median(v[ok])) if ok.any() else None

    def lr_by_step(cand: RunRecords, r: RunRecords) -> dict | None:
        steps, (ic, ir) = common_steps([cand, r])
        if steps.size == 0:
            return None
        g = min(cand.lr_all.shape[1], r.lr_all.shape[1])
        x, rv = cand.lr_all[ic, :g], r.lr_all[ir, :g]
        both = np.isfinite(x) & np.isfinite(rv)
        if not both.any():
            return None
        with np.errstate(invalid="ignore"):
            diff = both & (np.abs(x - rv) > LR_RTOL * np.maximum(np.abs(x), np.abs(rv)) + 1e-12)
        return _lr_evidence(diff, steps, x, rv, rv, cand, r, "step")

    def norm_ratio(cand: RunRecords, ref: RunRecords) -> dict | None:
        by = by_progress(cand, [ref])
        ic, ir = aligned(cand, [ref], by, [map_to(cand, ref)] if by else []).sel
        with np.errstate(invalid="ignore", divide="ignore"):
            g = cand.grad_norm[ic] / ref.grad_norm[ir]
            keep = np.flatnonzero(np.isfinite(g) & (g > 0))[:AVG_EARLY]
            if keep.size < AVG_EARLY // 2:
                return None
            loss = (cand.loss[ic] / ref.loss[ir])[keep]
        loss = loss[np.isfinite(loss)]
        return {"grad_norm": float(np.median(g[keep])), "steps": int(keep.size),
                "loss": float(np.median(loss)) if loss.size else None}

    def divergence(r: RunRecords) -> dict | None:
        runs = {k: x for k, x in r.ranks.items() if np.isfinite(x.col("param_sum")).any()}
        if len(runs) < 2:
            return None
        common = None
        for x in runs.values():
            s = np.unique(x.steps[np.isfinite(x.col("param_sum"))])
            common = s if common is None else np.intersect1d(common, s)
        if common is None or common.size == 0:
            return None
        sums = {k: x.col("param_sum")[np.intersect1d(common, x.steps, return_indices=True)[2]]
                for k, x in runs.items()}
        a = np.vstack(list(sums.values()))
        scale = np.maximum(np.abs(a).max(axis=0), 1.0)
        return {"steps": common, "spread": (a.max(axis=0) - a.min(axis=0)) / scale,
                "sums": sums}

    def spread(r: RunRecords) -> float | None:  # by brute force, as its own test above
        if len(r.ranks) < 2:
            return None
        known, first = [], []  # steps with a known clip; each step's norm at its first row
        for x in r.ranks.values():
            known.append({int(k) for k, g, m in zip(x.steps, x.grad_norm, x.max_norm,
                                                    strict=True)
                          if np.isfinite(m) and np.isfinite(g)})
            f: dict = {}
            for k, g in zip(x.steps, x.grad_norm, strict=True):
                f.setdefault(int(k), g)
            first.append(f)
        common = sorted(set.intersection(*known))
        if not common:
            return None
        a = np.array([[f[k] for k in common] for f in first])
        top = np.maximum(np.abs(a).max(axis=0), 1e-30)
        return float(np.median((a.max(axis=0) - a.min(axis=0)) / top))

    out: list = [div_text(divergence(c)), spread(c), increasing(c),
                 {k: increasing(x) for k, x in c.ranks.items()},
                 per_epoch(c), per_epoch(c, True), clip(c),
                 {k: clip(x) for k, x in c.ranks.items()},
                 [gap(c, s) for s in ("loss", "grad_norm")], [steady(c, w) for w in (0, 3)]]
    for r in refs:
        out += [lr_by_step(c, r), norm_ratio(c, r) if c.n else None]
        if c.n:
            out.append(clip(r.upto(int(c.steps.max()))))
    return repr(out)
