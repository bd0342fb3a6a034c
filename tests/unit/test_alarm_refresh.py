"""An open alarm's evidence as the run goes on (issue 27 item 5): when the checks record it
again (throttled), and the one fold of ``alarm.updated`` that the screen, the store's rows,
exports and replay read. Old logs, which never have the event, read as before."""

from __future__ import annotations

from pathlib import Path

from portside.core.checks import Alarm
from portside.core.checks.evidence import ClipConfig, ClippingChanged
from portside.core.checks.refresh import REFRESH_GROWTH, REFRESH_S, EvidenceRefresh
from portside.core.log import events as ev
from portside.core.log.ledger import fold
from portside.core.replay.player import Replayer
from portside.store import Store
from portside.store.exports.rows import iter_alarm_rows
from portside.store.replay_source import StoreSource
from portside.tui.model import SessionModel

SID = "refresh-1"


def _clip(ref_share: float, steps: int, severity: str = "error") -> Alarm:
    return Alarm("clipping-changed", severity, "max_norm changed: 0.05 vs reference 1",
                 ClippingChanged(references=[ClipConfig(clipped_share=ref_share, steps=steps)]),
                 key="clipping-changed")


def test_an_update_is_due_after_time_and_growth_and_always_at_the_end() -> None:
    r = EvidenceRefresh()
    raised = _clip(0.0, 1)
    assert r.due(raised, 8, 100.0, final=True) is None  # never raised: nothing to update
    r.recorded(raised, "al-1", 8, 0.0)
    assert r.due(raised, 80, REFRESH_S * 2, final=True) is None  # the same evidence
    assert r.due(_clip(0.3, 80), 80, REFRESH_S / 2, final=False) is None  # too soon
    assert r.due(_clip(0.3, 9), 9, REFRESH_S * 2, final=False) is None  # too few more steps
    step = int(8 * REFRESH_GROWTH) + 1
    due = r.due(_clip(0.3, step, severity="warning"), step, REFRESH_S * 2, final=False)
    assert due is not None and due[0] == "al-1"
    assert due[1].severity == "error" and due[1].evidence.references[0].steps == step
    # The final pass records any change, however soon.
    assert r.due(_clip(0.298, step + 1), step + 1, REFRESH_S * 2 + 0.1, final=True) is not None
    assert r.due(_clip(0.298, step + 1), step + 1, REFRESH_S * 9, final=True) is None


def _log() -> list[ev.Event]:
    raised = _clip(0.0, 1).raised(SID, "run-c")
    raised.ts = 10.0
    return [
        ev.SessionStarted(session_id=SID, project="p", target="cpu", ts=1.0),
        ev.RunStarted(session_id=SID, run_id="run-c", role="candidate", attempt=1,
                      command="python train.py", target="cpu", ts=2.0),
        raised,
        _clip(0.25, 60).updated(SID, raised.alarm_id, 60),
        ev.AlarmUpdated(session_id=SID, alarm_id="al-unknown", title="x", evidence={"a": 1}),
        _clip(0.298, 120).updated(SID, raised.alarm_id, 120),
    ]


def test_the_newest_evidence_is_what_every_reader_gets(tmp_path: Path) -> None:
    log = _log()
    alarm_id = log[2].alarm_id  # type: ignore[attr-defined]
    want = {"references": [{"clipped_share": 0.298, "steps": 120}]}
    entry = fold(log).alarms[alarm_id]
    assert (entry.evidence, entry.evidence_step, entry.severity) == (want, 120, "error")
    model = SessionModel()
    for e in log:
        model.apply(e)
    assert model.alarms[alarm_id].evidence == want and model.alarms[alarm_id].evidence_step == 120
    assert "al-unknown" not in model.alarms
    with Store(tmp_path / "s.db") as store:
        for e in log:
            store.recorder.append(e)
        store.recorder.flush()
        [row] = store.alarms(SID)
        assert row["evidence"] == want and row["severity"] == "error"
        [exported] = iter_alarm_rows(store, [SID])
        assert exported["evidence"] == want
        assert store.ledger(SID).alarms[alarm_id].evidence == want
        replay = Replayer(StoreSource(store, SID))
        assert replay.state_at(store.recorder.last_seq(SID)).alarms[alarm_id].evidence == want
        # A seek to before the last update shows the evidence as it stood then.
        before = replay.state_at(log[3].seq).alarms[alarm_id]
        assert before.evidence["references"][0]["steps"] == 60


def test_a_log_without_updates_reads_the_raised_evidence(tmp_path: Path) -> None:
    log = [e for e in _log() if not isinstance(e, ev.AlarmUpdated)]
    alarm_id = log[2].alarm_id  # type: ignore[attr-defined]
    raised = {"references": [{"clipped_share": 0.0, "steps": 1}]}
    entry = fold(log).alarms[alarm_id]
    assert (entry.evidence, entry.evidence_step) == (raised, None)
    model = SessionModel()
    for e in log:
        model.apply(e)
    assert model.alarms[alarm_id].evidence == raised
    assert model.alarms[alarm_id].title == log[2].title  # type: ignore[attr-defined]


def test_the_event_round_trips_and_names_a_bad_field() -> None:
    e = _clip(0.3, 60).updated(SID, "al-1", 60)
    e.seq, e.ts = 4, 5.0
    assert ev.decode(ev.encode(e)) == e
    bad = ev.encode(e).replace(b'"step":60', b'"step":"sixty"')
    try:
        ev.decode(bad)
    except ev.EventError as exc:
        assert "step" in str(exc)
    else:
        raise AssertionError("a string step decoded")
