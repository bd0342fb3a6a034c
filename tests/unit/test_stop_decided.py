"""[stop] in the criteria (issue 40.2) and the decided fold (issue 40.3), on logs built here:
the parse errors name file, line and field; the fold says at each point of a log whether the
verdict is decided and by what, the same whether folded live or replayed; the ledger states the
compute a stopped candidate saved."""

from __future__ import annotations

import pytest

from portside.core.checks import RunRecords
from portside.core.log import events as ev
from portside.core.log.criteria import (
    DEFAULT_CRITERIA,
    DEFAULT_STOP_ALARMS,
    DEFAULT_TOML_PATH,
    Criteria,
    CriteriaError,
    load_criteria,
    parse_criteria,
)
from portside.core.log.decided import decided, stop_kinds, stop_message, stops
from portside.core.log.ledger import STOPPED, Ledger, fold
from portside.core.session.outcome import summarize_run

SID = "s"


def test_stop_defaults_are_the_shipped_file_and_round_trip_through_the_log() -> None:
    assert DEFAULT_CRITERIA.stop.alarms == DEFAULT_STOP_ALARMS
    assert load_criteria(DEFAULT_TOML_PATH).stop == DEFAULT_CRITERIA.stop
    c = parse_criteria('[stop]\nalarms = ["numeric-drift", "clipping-changed"]\n', "c.toml")
    assert c.stop.alarms == ("numeric-drift", "clipping-changed")
    assert Criteria.from_dict(c.to_dict()).stop == c.stop
    assert parse_criteria("[stop]\nalarms = []\n").stop.alarms == ()
    # A log written before [stop] existed reads as the defaults.
    assert stop_kinds({"goal": {}}) == DEFAULT_STOP_ALARMS
    assert stop_kinds(c.to_dict()) == c.stop.alarms


@pytest.mark.parametrize(("text", "where", "what"), [
    ('[goal]\nmetric = "a"\n\n[stop]\nalarms = ["clipping-changed", "drift"]\n',
     "c.toml:5: stop.alarms", "unknown alarm kind 'drift'"),
    ('[stop]\nalarms = "clipping-changed"\n', "c.toml:2: stop.alarms",
     "must be a list of alarm kinds"),
    ("[stop]\nalarms = [1]\n", "c.toml:2: stop.alarms", "must be a list of alarm kinds"),
    ("[stop]\nkinds = []\n", "c.toml:2: stop.kinds", "unknown key (known: alarms)"),
    ("stop = 3\n", "c.toml:", "must be a table"),
])
def test_stop_errors_name_file_line_and_field(text: str, where: str, what: str) -> None:
    with pytest.raises(CriteriaError) as err:
        parse_criteria(text, "c.toml")
    assert str(err.value).startswith(where), err.value
    assert what in str(err.value)


def test_only_a_listed_kind_at_error_or_worse_stops() -> None:
    kinds = DEFAULT_STOP_ALARMS
    assert stops("clipping-changed", "error", kinds)
    assert stops("non-finite", "critical", kinds)
    assert not stops("clipping-changed", "warning", kinds)  # clipping that starts, never clips
    assert not stops("non-finite", "warning", kinds)  # the references' fp16 overflow steps too
    assert not stops("numeric-drift", "error", kinds)  # drift: judged at the end
    assert not stops("clipping-changed", "error", ())  # [stop] alarms = []


def _log(criteria: Criteria = DEFAULT_CRITERIA) -> list[ev.Event]:
    """Two references of 1,000 steps at 20 ms, then a candidate on the same device that a
    clipping change stops at step 3 (its own steady step 30 ms, from its first 4 steps)."""
    t = 1000.0
    log: list[ev.Event] = [ev.SessionStarted(session_id=SID, ts=t, project="p", target="cpu",
                                             criteria=criteria.to_dict())]
    for i in (1, 2):
        rid = f"ref{i}"
        log += [ev.RunStarted(session_id=SID, ts=t + i, run_id=rid, role="reference",
                              attempt=i, command="c", target="cpu"),
                ev.RunFinished(session_id=SID, ts=t + 20 + i, run_id=rid, exit_code=0,
                               outcome="passed", wall_s=20.0, steady_step_s=0.02, steps=1000,
                               device={"device_kind": "CPU", "device_count": 1})]
    log += [ev.RunStarted(session_id=SID, ts=t + 30, run_id="cand1", role="candidate",
                          attempt=1, command="c --max-norm 0.05", target="cpu"),
            ev.AlarmRaised(session_id=SID, ts=t + 31, alarm_id="a-drift", check="numeric-drift",
                           severity="error", title="loss leaves the envelope", run_id="cand1"),
            ev.AlarmRaised(session_id=SID, ts=t + 32.5, alarm_id="a-clip",
                           check="clipping-changed", severity="error",
                           title="max_norm changed: 0.05 vs reference 1", run_id="cand1"),
            ev.RunFinished(session_id=SID, ts=t + 33.5, run_id="cand1", exit_code=None,
                           signal=15, outcome="failed-silent", wall_s=3.5, steady_step_s=0.03,
                           steps=4, reason=STOPPED, error_type="Stopped",
                           error_message=stop_message("clipping-changed",
                                                      "max_norm changed: 0.05 vs reference 1",
                                                      3),
                           device={"device_kind": "CPU", "device_count": 1})]
    for seq, e in enumerate(log, 1):
        e.seq = seq
    return log


def _at(log: list[ev.Event], n: int) -> Ledger:
    return fold(log[:n])


def test_decided_at_each_point_of_the_log() -> None:
    log = _log()
    lines = [decided(_at(log, n)).line() for n in range(1, len(log) + 1)]
    assert lines[0] == "not decided: no candidate run yet"
    assert lines[5] == "not decided: drift judged at the end"  # the candidate started; no goal
    assert lines[6] == "not decided: drift judged at the end"  # drift raised: still open
    assert lines[7] == ("decided: fail — clipping-changed: max_norm changed: 0.05 vs "
                        "reference 1")
    assert lines[8] == ("decided: fail — stopped at step 3: clipping-changed: max_norm "
                        "changed: 0.05 vs reference 1")
    fact = decided(fold(log))
    assert fact.alarm_id == "a-clip" and fact.run_id == "cand1"
    assert fact.after_s == pytest.approx(2.5)  # raised 2.5 s into the run
    assert fact.short() == "decided: fail — clipping-changed, run stopped"
    assert fact.to_json()["decided"] is True


def test_decided_follows_the_criteria_logged() -> None:
    listed = parse_criteria('[goal]\nmetric = "acc"\n[stop]\nalarms = ["numeric-drift"]\n')
    log = _log(listed)
    assert decided(_at(log, 6)).line() == "not decided: the goal judged at the end"
    assert decided(_at(log, 7)).by == "numeric-drift: loss leaves the envelope"
    off = _log(parse_criteria("[stop]\nalarms = []\n"))
    assert decided(_at(off, 8)).line() == "not decided: drift judged at the end"


def test_an_override_undecides() -> None:
    log = _log()[:8]
    log.append(ev.AlarmCleared(session_id=SID, seq=9, ts=1033.0, alarm_id="a-clip",
                               reason="override"))
    assert not decided(fold(log)).decided


def test_the_ledger_states_the_compute_a_stopped_candidate_saved() -> None:
    led = fold(_log())
    assert led.expected_steps() == 1000
    # at the references' steady step: it ran on their device (its own 30 ms are its first steps)
    assert led.saved_s(led.runs["cand1"]) == pytest.approx((1000 - 4) * 0.02)
    cost = led.cost()
    assert cost["stopped_runs"] == 1
    assert cost["compute_saved_s"] == pytest.approx(19.92)
    assert cost["compute_saved_usd"] > 0  # priced as the run's device (CPU)
    assert led.failures == led.silent_failures == 1
    assert led.saved_s(led.runs["ref1"]) == 0.0


def test_a_candidate_stopped_inside_its_warm_up_saves_at_the_references_step_time() -> None:
    log = _log()
    fin = log[-1]
    assert isinstance(fin, ev.RunFinished)
    fin.steady_step_s = None
    led = fold(log)
    assert led.compute_saved_s == pytest.approx((1000 - 4) * 0.02)


# --- the compute saved, from step records -----------------------------------------------------

CPU = {"device_kind": "CPU", "device_count": 1}
TPU = {"device_kind": "TPU v5 lite", "device_count": 4}


def _cpu_steps(n: int, phase: int) -> list[float]:
    """A CPU run's step times as the bench read them: the first step 2 s (lazy set-up), the
    next 39 at 26 ms (the probe's first-steps work, portside starting beside it on the same
    cores), then 17 ms, +-0.5 ms."""
    return [2.0 if i == 0 else 0.026 if i < 40 else 0.017 + 0.0005 * ((i + phase) % 3 - 1)
            for i in range(n)]


def _tpu_steps(n: int) -> list[float]:
    """A TPU run's: 3 compiled steps (30 s, then 1 s twice), then 5 ms."""
    return [30.0 if i == 0 else 1.0 if i < 3 else 0.005 for i in range(n)]


def _finished(rid: str, steps: list[float], device: dict[str, object], *, compiled: int = 0,
              stopped: bool = False) -> ev.RunFinished:
    """run.finished as the verifier makes it from the run's step records (summarize_run)."""
    recs: list[dict[str, object]] = [{"type": "facts", **device}]
    recs += [{"type": "step", "step": i, "loss": 1.0, "step_s": s,
              "compile_s": s if i < compiled else 0.0} for i, s in enumerate(steps)]
    summary = summarize_run(RunRecords.from_records(recs), None if stopped else 0,
                            sum(steps), DEFAULT_CRITERIA.compile.warmup_steps)
    return ev.RunFinished(session_id=SID, run_id=rid, exit_code=None if stopped else 0,
                          outcome="failed-silent" if stopped else "passed",
                          wall_s=sum(steps), steady_step_s=summary["steady_step_s"],
                          steps=summary["steps"], reason=STOPPED if stopped else "exit",
                          device=summary["device"])


def _stopped_session(cand_device: dict[str, object], today: list[float], stopped_after: int,
                     compiled: int = 0) -> Ledger:
    """Two 2,000-step CPU references; a candidate stopped after `stopped_after` steps of the
    run `today` (its step times had it trained to its end)."""
    log: list[ev.Event] = [ev.SessionStarted(session_id=SID, project="p", target="cpu",
                                             criteria=DEFAULT_CRITERIA.to_dict())]
    for i in (1, 2):
        log += [ev.RunStarted(session_id=SID, run_id=f"ref{i}", role="reference", attempt=i,
                              command="c", target="cpu"),
                _finished(f"ref{i}", _cpu_steps(2000, i), CPU)]
    log += [ev.RunStarted(session_id=SID, run_id="cand1", role="candidate", attempt=1,
                          command="c --max-norm 0.05", target="cpu"),
            _finished("cand1", today[:stopped_after], cand_device, compiled=compiled,
                      stopped=True)]
    for seq, e in enumerate(log, 1):
        e.seq, e.ts = seq, 1000.0 + seq
    return fold(log)


def test_the_compute_saved_is_counted_at_the_steady_step_not_the_first_steps() -> None:
    # The candidate as it would have run today, on the references' device: what stopping it
    # after 60 steps saved is the time its steps 60..1999 took (~33 s), read off the records;
    # its own first 60 steps run at 26 ms where the run goes on at 17 ms.
    today = _cpu_steps(2000, 0)
    truth = sum(today[60:])
    led = _stopped_session(CPU, today, 60)
    assert led.runs["cand1"].stopped and led.expected_steps() == 2000
    assert led.compute_saved_s == pytest.approx(truth, rel=0.05)  # the first steps' said 50 s
    assert led.cost()["compute_saved_s"] == pytest.approx(truth, rel=0.05)


def test_a_candidate_on_another_device_is_counted_at_its_own_steady_step() -> None:
    # A port to a TPU stopped after 60 steps: the CPU references' 17 ms say nothing of its
    # 5 ms steps (its compiled steps are left out of its own steady step).
    today = _tpu_steps(2000)
    led = _stopped_session(TPU, today, 60, compiled=3)
    assert led.compute_saved_s == pytest.approx(sum(today[60:]), rel=0.05)
