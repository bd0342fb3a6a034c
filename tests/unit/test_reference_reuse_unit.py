"""Issue 40.1 without processes: which stored references may stand in for a fresh run, what a
reused one costs the session that reuses it, and how it is said."""

from __future__ import annotations

from portside.core.log import events as ev
from portside.core.log.ledger import fold
from portside.core.log.render import event_text
from portside.core.session.reference_reuse import KeyParts, StoredReference, unusable
from portside.tui.model import SessionModel

SID = "reuse-1"
TPU = {"backend": "torch_xla", "device_kind": "TPU", "device_name": "TPU v5e", "device_count": 1}
ORIGIN = {"session": "20260101-120000-abcd", "run_id": "ref1-aaaaaaaaaaaa",
          "finished_at": 1_767_268_800.0, "host": "tpu-vm-1"}


def _stored(outcome: str = "passed", steps: int = 3, tamper: bool = False) -> StoredReference:
    st = ev.RunStarted(session_id="old", run_id="ref1-x", role="reference", attempt=1,
                       command="python t.py", target="cpu", reuse_key="k", seq=5)
    recs = [{"type": "step", "step": i, "loss": 1.0} for i in range(steps)]
    if tamper:
        recs.append({"type": "tamper", "why": "unsealed record", "file": "x.jsonl", "line": 9})
    return StoredReference("old", st, ev.RunFinished(
        session_id="old", run_id="ref1-x", exit_code=0, outcome=outcome, steps=steps, ts=50.0),
        records=[ev.RunRecord(session_id="old", run_id="ref1-x", records=recs)])


def test_only_a_passed_sealed_run_with_steps_may_stand_in() -> None:
    assert unusable(_stored()) == ""
    assert "failed-error" in unusable(_stored(outcome="failed-error"))
    assert "aborted" in unusable(_stored(outcome="aborted"))
    assert "no step" in unusable(_stored(steps=0))
    assert "seal" in unusable(_stored(tamper=True))


def test_a_copy_of_a_copy_names_the_run_that_computed_it() -> None:
    s = _stored()
    assert s.origin() == {"session": "old", "run_id": "ref1-x", "finished_at": 50.0, "host": ""}
    s.started = ev.RunStarted(session_id="old", run_id="ref1-x", role="reference", attempt=1,
                              command="c", target="cpu", reused_from=ORIGIN)
    assert s.origin() == ORIGIN


def test_the_key_differs_by_seed_offset_and_every_fact() -> None:
    parts = KeyParts({"command": "python t.py", "tree": "t1"})
    assert parts.key(0) == KeyParts({"tree": "t1", "command": "python t.py"}).key(0)
    assert parts.key(0) != parts.key(1)
    assert parts.key(0) != KeyParts({"command": "python t.py", "tree": "t2"}).key(0)


def _log(reused: bool) -> list[ev.Event]:
    log: list[ev.Event] = [ev.SessionStarted(session_id=SID, project="/p", target="tpu",
                                             criteria={"prices": {"tpu-v5e": 2.0}}, ts=1.0)]
    for n in (1, 2):
        log += [ev.RunStarted(session_id=SID, run_id=f"ref{n}", role="reference", attempt=n,
                              command="python t.py", target="tpu", ts=2.0,
                              reused_from=ORIGIN if reused else {}),
                ev.RunFinished(session_id=SID, run_id=f"ref{n}", exit_code=0, outcome="passed",
                               wall_s=1800.0, steps=10, device=TPU, ts=3.0)]
    log += [ev.RunStarted(session_id=SID, run_id="cand1", role="candidate", attempt=1,
                          command="python t.py", target="tpu", ts=4.0),
            ev.RunFinished(session_id=SID, run_id="cand1", exit_code=0, outcome="passed",
                           wall_s=900.0, steps=10, device=TPU, ts=5.0)]
    return log


def test_a_reused_reference_costs_nothing_again() -> None:
    fresh, reused = fold(_log(False)), fold(_log(True))
    assert fresh.compute_usd == 2.5  # two half-hour references and a quarter-hour at $2/h
    assert reused.compute_usd == 0.5  # the candidate alone: the references counted where run
    assert [r.valid_reference for r in reused.references()] == [True, True]  # still vouch
    assert reused.cost()["unpriced_runs"] == []


def test_the_console_and_the_screen_say_where_it_came_from() -> None:
    started = _log(True)[1]
    assert "reused from 20260101-120000-abcd 2026-01-01 12:00 UTC on tpu-vm-1" in event_text(started)
    model = SessionModel()
    for e in _log(True):
        model.apply(e)
    run = model.runs["ref1"]
    assert run.mark == "✓↺"
    assert model.runs["cand1"].mark == "✓"
