"""One comparison per pass (core/checks/records/comparison.py), the CHECKS list and its cause-linking
step (causes.py). Ground truth: the runs' steps per epoch and batches are set here, the scaled
learning rates are rebuilt from records divided here, and a live verdict must equal the
rebuild's."""

from __future__ import annotations

import math

import pytest
from test_progress_ranks import OK, REFS, mnist_like

from portside.core.checks import (
    CHECKS,
    Alarm,
    Comparison,
    RunRecords,
    check_lr_batch,
    read_evidence,
    run_checks,
)
from portside.core.checks.causes import link_causes
from portside.core.checks.lr import check_lr
from portside.core.checks.records import comparison as comparison_mod
from portside.core.checks.records.records_fold import IncrementalRecords
from portside.core.log.criteria import DEFAULT_CRITERIA


def records(recs: list[dict]) -> RunRecords:
    return RunRecords.from_records(recs, OK)


def test_one_alignment_for_every_check() -> None:
    # 63 steps per epoch in the references, 62 in the candidate (drop_last), the per-epoch
    # schedule dropped: every check that says how it compared says "progress".
    refs = [records(r) for r in REFS]
    cand = records(mnist_like(62, seed=5, gamma=None))
    c = Comparison(refs, cand, final=True)
    assert c.by_progress and c.alignment.mode == "progress"
    assert all(p.by_progress and p.alignment.mode == "progress" for p in c.pairings)
    by = {a.kind: getattr(a.evidence, "aligned_by", None) for a in run_checks(refs, cand, DEFAULT_CRITERIA,
                                                                    "cpu", True)}
    assert by["lr-schedule-changed"] == by["step-count-differs"] == "progress", by
    same = Comparison(refs, records(mnist_like(63, seed=5)), final=True)
    assert not same.by_progress and same.alignment.mode == "step"


def test_each_reference_is_mapped_to_the_candidate_once_per_pass(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = comparison_mod.map_to

    def counted(cand: RunRecords, ref: RunRecords):  # type: ignore[no-untyped-def]
        calls.append(ref.name)
        return real(cand, ref)

    monkeypatch.setattr(comparison_mod, "map_to", counted)
    refs = [RunRecords.from_records(r, OK, f"ref{i}") for i, r in enumerate(REFS)]
    # drift, lr (both by progress) and the step count all judge this candidate
    alarms = run_checks(refs, records(mnist_like(62, seed=5, gamma=None)), DEFAULT_CRITERIA,
                        "cpu", True)
    assert {"lr-schedule-changed", "step-count-differs"} <= {a.kind for a in alarms}
    assert sorted(calls) == ["ref0", "ref1", "ref2"]


def batch_run(batch: int, lr: float, seed: int) -> list[dict]:
    recs = mnist_like(63, epochs=3, seed=seed, batch=batch)
    for r in recs[1:]:
        r["lr"] = [lr * x for x in r["lr"]]
    return recs


@pytest.mark.parametrize("factor", [2.0, math.sqrt(2.0), 1.5])
def test_a_scaled_lr_is_judged_as_records_with_that_lr(factor: float) -> None:
    # The global batch doubled (128 vs 64) and the lr scaled by `factor`: linear and √ rules
    # pass as scaled (info), another factor is an lr change; each scaled variant judges as
    # records rebuilt with the lr divided here.
    refs = [records(batch_run(64, 1.0, s)) for s in (0, 1)]
    cand = batch_run(128, factor, 5)
    c = Comparison(refs, records(cand))
    (a,) = check_lr_batch(c, DEFAULT_CRITERIA)
    for f in (2.0, math.sqrt(2.0)):
        scaled = c.scaled_lr(f)
        divided = [dict(r, lr=[x / f for x in r["lr"]]) if r.get("type") == "step" else r
                   for r in cand]
        fresh = Comparison(refs, records(divided))
        assert [x.to_dict() for x in check_lr(scaled, DEFAULT_CRITERIA)] == [x.to_dict() for x in check_lr(fresh, DEFAULT_CRITERIA)]
        # steps and progress are the candidate's own: the pairs' facts are kept, not re-derived
        assert all(s.progress_map is p.progress_map
                   for s, p in zip(scaled.pairings, c.pairings, strict=True))
    if factor == 1.5:
        assert a.kind == "lr-schedule-changed" and a.evidence.batch_ratio == 2.0
    else:
        assert (a.kind, a.severity) == ("global-batch-changed", "info")
        assert a.evidence.lr_factor == pytest.approx(factor)


def test_a_carried_lr_verdict_is_about_its_own_reference() -> None:
    # A live candidate judged against reference A, then (the same fold, grown) against B in
    # A's place: B's verdict is B's own from its first step, as the rebuild gives it.
    cand = batch_run(64, 1.0, 5)
    a_ref = records(batch_run(64, 1.0, 0))  # the candidate's schedule
    b_ref = records(batch_run(64, 0.5, 1))  # another lr from step 0
    live = IncrementalRecords()
    live.add(cand[:100])
    assert check_lr(Comparison([a_ref], live.snapshot(None, "cand")), DEFAULT_CRITERIA) == []
    live.add(cand[100:])
    got = check_lr(Comparison([b_ref], live.snapshot(None, "cand")), DEFAULT_CRITERIA)
    want = check_lr(Comparison([b_ref], records(cand)), DEFAULT_CRITERIA)
    assert [x.to_dict() for x in got] == [x.to_dict() for x in want]
    assert got and got[0].evidence.first_step == 0


def alarm(kind: str, severity: str = "error", **evidence: object) -> Alarm:
    return Alarm(kind, severity, kind, read_evidence(kind, evidence), key=kind)


def test_consequences_name_their_error_causes() -> None:
    c = Comparison([], records(mnist_like(63, epochs=1)))
    lr, clip = alarm("lr-schedule-changed"), alarm("clipping-changed", reason="before-reduction")
    info = alarm("global-batch-changed", "info")
    drift = alarm("numeric-drift")
    causes, (got,) = link_causes([[lr, info], [clip]], [[drift]], c)
    assert causes == [[lr, info], [clip]]
    assert got[0].evidence.likely_causes == ["clipping-changed", "lr-schedule-changed"]
    # ranks that never reduce are the cause, not where the clipping sits
    causes, (got,) = link_causes([[lr], [clip], [alarm("ranks-diverged")]], [[drift]], c)
    assert causes == [[lr], [], [alarm("ranks-diverged")]]
    assert got[0].evidence.likely_causes == ["lr-schedule-changed", "ranks-diverged"]
    assert link_causes([[info]], [[drift]], c)[1] == [[drift]]  # nothing at error level


def test_checks_are_named_once_and_causes_come_before_consequences() -> None:
    names = [check.name for check in CHECKS]
    assert len(set(names)) == len(names)
    roles = [check.role for check in CHECKS]
    # causes come before the consequences they are linked to
    assert set(roles) == {"standalone", "cause", "consequence"}
    assert max(i for i, r in enumerate(roles) if r == "cause") < min(
        i for i, r in enumerate(roles) if r == "consequence")
