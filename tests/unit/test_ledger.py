"""The ledger: the one fold of a session's log into its facts (costs, effort, attempts)."""

from __future__ import annotations

import pytest

from portside.core.log import events as ev
from portside.core.log.ledger import Ledger, fold

SID = "led-1"
TPU = {"backend": "torch_xla", "device_kind": "TPU", "device_name": "TPU v5e", "device_count": 1}


def _run(run_id: str, role: str, attempt: int, outcome: str, wall_s: float, ts: float
         ) -> list[ev.Event]:
    return [
        ev.RunStarted(session_id=SID, run_id=run_id, role=role, attempt=attempt,  # type: ignore[arg-type]
                      command="python train.py", target="tpu", ts=ts),
        ev.RunFinished(session_id=SID, run_id=run_id, exit_code=0, outcome=outcome,
                       wall_s=wall_s, device=TPU, ts=ts + wall_s),
    ]


def _act(action: str, span: float, *, at: float = 100.0, replay: bool = False, note: str = "",
         verdict: str = "", target: str = "") -> ev.Intervention:
    return ev.Intervention(session_id=SID, intervention_id=ev.new_id("i-"), action=action,  # type: ignore[arg-type]
                           steering=action in ev.STEERING_ACTIONS, attention_started_at=at,
                           decided_at=at + span, during_replay=replay, note=note,
                           verdict=verdict, target_id=target)  # type: ignore[arg-type]


def session_log() -> list[ev.Event]:
    log: list[ev.Event] = [ev.SessionStarted(
        session_id=SID, project="/p", target="tpu:v5e",
        criteria={"prices": {"tpu-v5e": 2.0, "human-hour": 120.0}}, ts=1.0)]
    log += _run("ref1", "reference", 1, "passed", 1800.0, 10.0)  # $1.00 at the overridden $2/h
    log += _run("ref2", "reference", 2, "aborted", 36.0, 2000.0)  # engine-killed: not valid
    log += _run("cand1", "candidate", 1, "failed-silent", 3600.0, 3000.0)  # $2.00
    log += _run("cand2", "candidate", 2, "failed-error", 0.0, 7000.0)
    log += _run("cand3", "candidate", 3, "passed", 900.0, 8000.0)  # $0.50
    log += [
        # What the Claude agent records for 200k cache reads + 50k cache writes (sonnet 4.5).
        ev.AgentUsage(session_id=SID, model="claude-sonnet-4-5", input_tokens=1000,
                      output_tokens=500, cache_read_tokens=200_000, cache_write_tokens=50_000,
                      cost_usd=0.2805),
        ev.AgentUsage(session_id=SID, model="mystery-model", input_tokens=10, output_tokens=10),
        ev.AlarmRaised(session_id=SID, alarm_id="a1", check="numeric-drift", severity="error",
                       title="drift", run_id="cand1", seq=0),
        ev.AlarmRaised(session_id=SID, alarm_id="a2", check="goal-regression",
                       severity="error", title="goal", run_id="cand1"),
        _act("approve", 60.0),
        _act("override-alarm", 30.0, at=200.0, target="a1", note="known noise"),
        ev.AlarmCleared(session_id=SID, alarm_id="a1", reason="overridden"),
        _act("verdict", 30.0, at=300.0, verdict="pass", note="looks right"),
        _act("review-note", 600.0, replay=True, note="later look"),
        _act("approve", -5.0),  # a clock step backwards counts 0, never negative
        ev.SessionEnded(session_id=SID, verdict="pass", reason="reviewer: looks right"),
    ]
    for n, e in enumerate(log, 1):
        e.seq = n
    return log


def test_the_ledger_counts_what_the_study_counts() -> None:
    led = fold(session_log())
    assert led.compute_usd == pytest.approx(1.0 + 2.0 + 0.5 + 2.0 * 36 / 3600)
    assert led.token_usd == pytest.approx(0.2805)  # as recorded, cache tokens included
    assert led.unpriced_models == {"mystery-model"}
    assert led.interventions == 4 and led.steering == 1  # the override steers
    assert led.human_minutes == pytest.approx(2.0)  # 60 + 30 + 30 s; the review note apart
    assert led.review_notes == 1 and led.review_s == pytest.approx(600.0)
    assert led.human_usd == pytest.approx(2.0 / 60 * 120.0)  # the overridden human rate
    assert (led.attempts, led.failures, led.silent_failures, led.successful_runs) == (3, 2, 1, 1)
    assert [r.run_id for r in led.valid_references()] == ["ref1"]
    assert led.verdict == ("pass", "looks right")
    assert [a.alarm_id for a in led.open_errors()] == ["a2"] and led.alarms["a1"].overridden
    assert led.goal_met() is False  # passed, but a goal-regression was raised
    cost = led.cost()
    assert cost["total_usd"] == pytest.approx(led.compute_usd + 0.2805 + led.human_usd)
    assert cost["cost_per_successful_run_usd"] == pytest.approx(cost["total_usd"])
    assert cost["cache_read_tokens"] == 200_000 and cost["failed_attempts"] == 2


def test_copy_is_independent_and_fold_is_incremental() -> None:
    log = session_log()
    half = fold(log[:12])
    other = half.copy()
    for e in log[12:]:
        other.apply(e)
    assert other.cost() == fold(log).cost()
    assert half.cost() == fold(log[:12]).cost()  # the copy did not touch the original


def test_verdicts_recorded_before_the_field_existed_still_read() -> None:
    led = Ledger()
    led.apply(_act("verdict", 1.0, note="fail: accuracy dropped"))
    assert led.verdict == ("fail", "accuracy dropped")


def test_bad_recorded_price_overrides_fall_back_and_say_so() -> None:
    led = Ledger()
    led.apply(ev.SessionStarted(session_id=SID, project="/p", target="cpu",
                                criteria={"prices": {"no-such-device": 1.0}}))
    assert "no-such-device" in led.price_error and led.cost()["price_error"]


def test_one_number_parser_for_checks_metrics_table_and_chart(tmp_path) -> None:
    """A value the checks accept ("1.5" in a record) is in the metrics table and the chart."""
    from portside.core.checks.records.records import to_float
    from portside.store import Store
    from portside.tui.model import SessionModel

    assert to_float is ev.record_number
    assert [ev.record_number(v) for v in ("1.5", " 2 ", "inf", True, None, "x", 10**400)] == [
        1.5, 2.0, float("inf"), None, None, None, float("inf")]
    started = ev.RunStarted(session_id=SID, run_id="r1", role="candidate", attempt=1,
                            command="c", target="cpu", seq=2)
    record = ev.RunRecord(session_id=SID, run_id="r1", seq=3,
                          records=[{"type": "step", "step": 0, "loss": "1.5", "grad_norm": 2}])
    model = SessionModel({"session_id": SID})
    model.apply(started)
    model.apply(record)
    assert list(model.runs["r1"].losses) == [1.5]
    with Store(tmp_path / "n.db") as store:
        rec = store.recorder
        rec.append(ev.SessionStarted(session_id=SID, project="/p", target="cpu"))
        rec.append(started)
        rec.append(record)
        rec.flush()
        rows = store.conn.execute("SELECT name, value FROM metrics ORDER BY name").fetchall()
    assert [tuple(r) for r in rows] == [("grad_norm", 2.0), ("loss", 1.5)]


def test_a_run_cut_off_by_a_kill_of_portside_is_not_an_attempt() -> None:
    log = _run("cand1", "candidate", 1, "failed-error", 60.0, 10.0)
    killed = _run("cand2", "candidate", 2, "aborted", 3600.0, 100.0)
    killed[1].reason = "engine-killed"  # type: ignore[attr-defined]
    led = fold([*log, *killed])
    assert led.attempts == 1 and led.failures == 1
    assert led.compute_usd == pytest.approx(costs_of(60.0 + 3600.0))  # the compute was spent


def costs_of(seconds: float) -> float:
    from portside.core.log.costs import default_prices

    return seconds / 3600 * default_prices().usd("tpu-v5e")


def test_only_runs_portside_was_killed_during_are_superseded_by_their_rerun() -> None:
    """Issue 37.4: what a rerun closes, and what stays history."""

    def run(run_id: str, role: str, attempt: int, outcome: str, reason: str = "",
            alarm: str = "") -> list[ev.Event]:
        events = _run(run_id, role, attempt, outcome, 10.0, 0.0)
        events[1].reason = reason  # type: ignore[attr-defined]
        if alarm:
            events.append(ev.AlarmRaised(session_id=SID, alarm_id=f"al-{run_id}", check=alarm,
                                         severity="error", title=alarm, run_id=run_id))
        return events

    log = [
        # reference #1 cut off by a signal (its alarm), #2 failed on its own, #3 aborted by
        # the reviewer: only #1 has a rerun that supersedes it
        *run("ref1", "reference", 1, "aborted", "engine-killed", "reference-failed"),
        *run("ref2", "reference", 2, "failed-error", "", "reference-failed"),
        *run("ref3", "reference", 3, "aborted", "aborted", "reference-failed"),
        # candidate attempt #1 failed (the agent answered for it); attempt #2 was cut off twice
        *run("cand1", "candidate", 1, "failed-silent", "", "numeric-drift"),
        *run("cand2a", "candidate", 2, "aborted", "engine-killed", "clipping-changed"),
        *run("cand2b", "candidate", 2, "aborted", "engine-killed", "numeric-drift"),
        *run("ref1b", "reference", 1, "passed"),
        *run("ref2b", "reference", 2, "passed"),  # in their slots: ref2 and ref3 stand
        *run("ref3b", "reference", 3, "passed"),
        *run("ref4", "reference", 4, "passed"),  # another slot
        *run("cand2c", "candidate", 2, "passed"),
        *run("big2", "larger", 2, "passed"),
    ]
    for n, e in enumerate(log, 1):
        e.seq = n
    led = fold(log)

    def closed(run_id: str) -> list[tuple[str, str]]:
        return [(a.alarm_id, r.run_id) for a, r in led.superseded_by(run_id)]

    assert closed("ref1b") == [("al-ref1", "ref1")]
    assert closed("ref2b") == closed("ref3b") == closed("ref4") == closed("ref1") == []
    assert closed("big2") == []
    assert closed("cand2c") == [("al-cand2a", "cand2a"), ("al-cand2b", "cand2b")]
    assert closed("cand2b") == [("al-cand2a", "cand2a")]  # a rerun cut off again, too
    assert closed("nope") == []
    led.apply(ev.AlarmCleared(session_id=SID, alarm_id="al-cand2a", reason="superseded by x",
                              seq=len(log) + 1))
    assert closed("cand2c") == [("al-cand2b", "cand2b")]  # closed once
    assert led.alarms["al-cand2a"].cleared_reason == "superseded by x"
    assert {a.alarm_id for a in led.open_errors()} == {
        "al-ref1", "al-ref2", "al-ref3", "al-cand1", "al-cand2b"}  # the fold alone clears none


def test_the_checks_card_says_why_an_alarm_was_cleared() -> None:
    from portside.tui.model import SessionModel
    from portside.tui.widgets.checks import evidence_text

    model = SessionModel({"session_id": SID})
    model.apply(ev.AlarmRaised(session_id=SID, alarm_id="a1", check="reference-failed",
                               severity="error", title="reference run #1 did not train",
                               run_id="ref1", seq=1))
    assert "cleared" not in evidence_text(model.alarms["a1"]).plain
    model.apply(ev.AlarmCleared(session_id=SID, alarm_id="a1", seq=2,
                                reason="superseded by ref1-b: reference #1 run again"))
    assert "cleared: superseded by ref1-b: reference #1 run again" in evidence_text(
        model.alarms["a1"]).plain
