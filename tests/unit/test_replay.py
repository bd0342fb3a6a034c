"""Replay engine: timing, speed changes, seeking through snapshots, --from, headless CLI."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tiers import examples

from portside.cli.main import main
from portside.core.log import events as ev
from portside.core.replay.index import STRUCTURAL_KINDS, ReplayError, SequenceSource
from portside.core.replay.player import DEFAULT_IDLE_LIMIT, Replayer, parse_from
from portside.core.replay.state import ReplayState, fold
from portside.store import Store
from portside.store.jsonl import export_to_file
from portside.store.replay_source import StoreSource

SID = "20260301-replay-0001"
T0 = 1_772_000_000.0


def _session(n_runs: int = 3, seed: int = 1, sid: str = SID) -> list[ev.Event]:
    """Runs (two concurrent), output, records, edits, alarms, interventions, idle gaps."""
    rng = random.Random(seed)
    out: list[ev.Event] = []
    t = T0

    def add(e: ev.Event, dt: float = 0.1) -> None:
        nonlocal t
        t += dt
        e.session_id, e.seq, e.ts = sid, len(out) + 1, t
        out.append(e)

    add(ev.SessionStarted(session_id=sid, project="/p/mnist", target="tpu:v5e", agent="scripted"), 0)
    add(ev.RunStarted(session_id=sid, run_id="ref1", role="reference", attempt=1,
                      command="python train.py", target="cpu"))
    for k in range(1, n_runs + 1):
        add(ev.AgentText(session_id=sid, text=f"turn {k}"), 5.0)  # an idle gap > 2 s
        add(ev.AgentToolCall(session_id=sid, call_id=f"c{k}", name="read_file", input={"p": k}))
        add(ev.EditProposed(session_id=sid, edit_id=f"e{k}", path="train.py", before="a", after="b"))
        add(ev.Intervention(session_id=sid, intervention_id=f"i{k}", action="reject" if k % 2 else "approve",
                            steering=bool(k % 2), attention_started_at=t, decided_at=t + 3.5,
                            reviewer="ana", answers=len(out)))
        add(ev.EditDecided(session_id=sid, edit_id=f"e{k}", decision="rejected" if k % 2 else "approved"))
        rid = f"cand{k}"
        add(ev.RunStarted(session_id=sid, run_id=rid, role="candidate", attempt=k,
                          command="python train.py", target="tpu:v5e"))
        for step in range(rng.randint(5, 30)):
            run = rid if rng.random() < 0.8 else "ref1"
            if rng.random() < 0.3:
                add(ev.RunRecord(session_id=sid, run_id=run,
                                 records=[{"type": "step", "step": step, "loss": 1 / (step + 1)}]))
            else:
                add(ev.RunOutput(session_id=sid, run_id=run,
                                 lines=[f"{run} line {step}.{j}" for j in range(rng.randint(0, 4))]))
        add(ev.AgentUsage(session_id=sid, model="claude-sonnet-4-5", input_tokens=10,
                          output_tokens=5, cost_usd=0.25))
        add(ev.RunFinished(session_id=sid, run_id=rid, exit_code=0,
                           outcome="passed" if k == n_runs else "failed-silent", wall_s=30.0))
        if k < n_runs:
            add(ev.AlarmRaised(session_id=sid, alarm_id=f"a{k}", check="numeric-drift",
                               severity="error", title=f"drift {k}", run_id=rid))
            add(ev.AlarmAcknowledged(session_id=sid, alarm_id=f"a{k}", by="ana"))
    add(ev.AgentClaimed(session_id=sid, summary="ported"), 1.0)
    add(ev.RunFinished(session_id=sid, run_id="ref1", exit_code=0, outcome="passed", wall_s=99.0))
    add(ev.SessionEnded(session_id=sid, verdict="pass", reason="no error alarm"), 30.0)
    return out


EVENTS = _session(n_runs=6, seed=3)


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def _seek_time(rp: Replayer, seconds: float) -> ReplayState:
    """Seek to ``seconds`` after the session's first event, on the original clock."""
    if not len(rp.index):
        return rp.seek(0)
    pos = int(np.searchsorted(rp.index.ts, float(rp.index.ts[0]) + seconds, side="right")) - 1
    return rp.seek(int(rp.index.seqs[pos]) if pos >= 0 else 0)


# --- timing ---------------------------------------------------------------------------------


def test_speed_1000_plays_in_order_with_compressed_gaps() -> None:
    clock = FakeClock()
    rp = Replayer(SequenceSource(EVENTS), speed=1000, clock=clock)
    arrivals: list[tuple[int, float]] = []
    shown = rp.play_all(lambda e: arrivals.append((e.seq, clock.t)), sleep=clock.sleep)
    assert shown == len(EVENTS)
    assert [s for s, _ in arrivals] == [e.seq for e in EVENTS]
    # Each event arrives when its compressed offset / speed has elapsed (never early).
    for (seq, at), e in zip(arrivals, EVENTS, strict=True):
        assert at - 100.0 >= rp.offset_of(seq) / 1000 - 1e-9
        assert seq == e.seq
    gaps = [b.ts - a.ts for a, b in zip(EVENTS, EVENTS[1:], strict=False)]
    expected = sum(min(max(g, 0.0), DEFAULT_IDLE_LIMIT) for g in gaps)
    assert rp.duration == pytest.approx(expected)
    assert max(gaps) > DEFAULT_IDLE_LIMIT  # the fixture has idle gaps to compress
    assert clock.t - 100.0 == pytest.approx(expected / 1000, abs=0.01)


def test_set_speed_mid_play_reanchors() -> None:
    clock = FakeClock()
    rp = Replayer(SequenceSource(EVENTS), speed=1.0, idle_limit=None, clock=clock)
    rp.play()
    clock.t += 5.0  # 5 s at speed 1
    first = rp.due(limit=10_000)
    assert first and all(e.ts - T0 <= 5.0 for e in first)
    rp.set_speed(10.0)
    clock.t += 2.0  # 20 s of session time at speed 10
    second = rp.due(limit=10_000)
    assert second[0].seq == first[-1].seq + 1
    assert all(e.ts - T0 <= 25.0 + 1e-9 for e in second)
    assert second[-1].ts - T0 > 20.0
    wait = rp.next_due_in()
    assert wait is not None and wait == pytest.approx((rp.offset_of(rp.position + 1) - 25.0) / 10)


def test_pause_step_and_instant() -> None:
    clock = FakeClock()
    rp = Replayer(SequenceSource(EVENTS), speed=1.0, clock=clock)
    rp.play()
    clock.t += 1.0
    got = rp.due()
    rp.pause()
    clock.t += 100.0
    assert rp.due() == [] and rp.next_due_in() is None
    e = rp.step()
    assert e is not None and e.seq == (got[-1].seq if got else 0) + 1
    rp.set_speed(0)  # instant
    rp.play()
    rest = rp.due(limit=10**6)
    assert rest[-1].seq == EVENTS[-1].seq and rp.at_end and not rp.playing


def test_bad_speed() -> None:
    with pytest.raises(ReplayError, match="speed"):
        Replayer(SequenceSource(EVENTS), speed=-1)


# --- seeking --------------------------------------------------------------------------------


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seqs=st.lists(st.integers(0, len(EVENTS)), min_size=1, max_size=6),
       every=st.integers(1, 9), tail=st.integers(1, 6))
def test_state_at_equals_the_full_fold(seqs: list[int], every: int, tail: int) -> None:
    rp = Replayer(SequenceSource(EVENTS), snapshot_every=every, tail_lines=tail)
    for seq in seqs:
        assert rp.state_at(seq) == fold(EVENTS[:seq], tail_lines=tail)


def test_state_at_from_the_store_equals_the_fold(tmp_path: Path) -> None:
    store = _store_with(tmp_path / "s.db", EVENTS)
    rp = Replayer(StoreSource(store, SID), snapshot_every=4, tail_lines=5)
    for seq in (0, 1, 7, len(EVENTS) // 2, len(EVENTS) - 1, len(EVENTS)):
        assert rp.state_at(seq) == fold(EVENTS[:seq], tail_lines=5)
    # The writer's blocks hold the index: no row of `events` is read, appended events too.
    source = StoreSource(store, SID)
    Replayer(source)
    assert source.index_rows_fetched == 0 and source.index_blocks_read == 1
    extra = ev.AgentText(session_id=SID, text="after")
    store.recorder.append(extra)
    store.recorder.flush()
    source = StoreSource(store, SID)
    rp = Replayer(source)
    assert source.index_rows_fetched == 0 and rp.index.last_seq == len(EVENTS) + 1
    # Without blocks (a session written before v4): built from `events`, then extended.
    source = StoreSource(store, SID, blocks=False)
    Replayer(source)
    assert source.index_rows_fetched == len(EVENTS) + 1
    store.recorder.append(ev.AgentText(session_id=SID, text="later"))
    store.recorder.flush()
    source = StoreSource(store, SID, blocks=False)
    rp = Replayer(source)
    assert source.index_rows_fetched == 1 and rp.index.last_seq == len(EVENTS) + 2
    store.close()


def test_seek_markers_and_time() -> None:
    rp = Replayer(SequenceSource(EVENTS))
    alarms = [e.seq for e in EVENTS if isinstance(e, ev.AlarmRaised)]
    acts = [e.seq for e in EVENTS if isinstance(e, ev.Intervention)]
    marks = [s for s, _, _ in rp.markers()]
    assert set(alarms) | set(acts) <= set(marks)
    rp.seek(0)
    assert rp.next_marker(["alarm.raised"]) == alarms[0]
    rp.seek(alarms[1])
    assert rp.next_marker(["alarm.raised"]) == alarms[2]
    assert rp.prev_marker(["alarm.raised"]) == alarms[0]  # not the one we stand on
    assert rp.prev_marker(["alarm.raised", "intervention"]) == max(
        s for s in alarms + acts if s < alarms[1])
    state = _seek_time(rp, EVENTS[10].ts - T0)
    assert state.seq == 10 + 1 and rp.position == 11
    assert rp.seek(rp.index.last_seq).verdict == "pass"
    assert rp.seek(0).seq == 0 and rp.step() is EVENTS[0]
    with pytest.raises(ReplayError, match="not marker kinds"):
        rp.next_marker(["run.output"])


# --- --from ---------------------------------------------------------------------------------


def test_from_resolves() -> None:
    rp = Replayer(SequenceSource(EVENTS))
    alarms = [e.seq for e in EVENTS if isinstance(e, ev.AlarmRaised)]
    acts = [e.seq for e in EVENTS if isinstance(e, ev.Intervention)]
    assert rp.resolve_from("alarm:1") == alarms[0]
    assert rp.resolve_from("alarm:last") == alarms[-1]
    assert rp.resolve_from("intervention:2") == acts[1]
    assert rp.resolve_from("seq:5") == 5
    assert rp.resolve_from("seq:last") == len(EVENTS)
    assert rp.resolve_from("time:0") == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("alarm", "expected alarm:N"),
        ("bogus:3", "expected alarm:N"),
        ("alarm:-1", "expected alarm:N"),
        ("alarm:0", "count from 1"),
        ("seq:1.5", "whole number"),
        ("alarm:99", "has 5 alarms"),
        ("seq:100000", "seq 1.."),
        ("time:100000", "lasts"),
    ],
)
def test_from_errors(text: str, message: str) -> None:
    rp = Replayer(SequenceSource(EVENTS))
    with pytest.raises(ReplayError, match=message):
        rp.resolve_from(text)


def test_from_no_such_marker() -> None:
    events = [e for e in EVENTS if not isinstance(e, ev.Intervention)]
    for i, e in enumerate(events, start=1):
        e2 = ev.from_builtins({**ev.to_builtins(e), "seq": i})
        events[i - 1] = e2
    with pytest.raises(ReplayError, match="no interventions"):
        Replayer(SequenceSource(events)).resolve_from("intervention:1")
    assert parse_from("intervention:last").n is None


# --- the CLI --------------------------------------------------------------------------------


def _store_with(db: Path, events: list[ev.Event]) -> Store:
    from portside.store.jsonl import import_events

    store = Store(db)
    import_events(store, [ev.decode(ev.encode(e)) for e in events])
    return store


def test_headless_replay_cli(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    _store_with(db, EVENTS).close()
    res = CliRunner().invoke(main, ["--db", str(db), "replay", SID[:12], "--headless",
                                    "--speed", "0"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert len(lines) == len(EVENTS)
    assert "session started" in lines[0] and "session ended" in lines[-1]
    assert [int(line.split()[0]) for line in lines] == list(range(1, len(EVENTS) + 1))


def test_headless_replay_from_alarm_and_jsonl(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    store = _store_with(db, EVENTS)
    rec = tmp_path / "s.jsonl"
    export_to_file(store, SID, rec)
    store.close()
    alarm = [e for e in EVENTS if isinstance(e, ev.AlarmRaised)][-1]
    # A recording replays without import (a fresh db stays empty).
    res = CliRunner().invoke(main, ["--db", str(tmp_path / "empty.db"), "replay", str(rec),
                                    "--headless", "--speed", "0", "--from", "alarm:last"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0].split()[0] == str(alarm.seq) and "ALARM error numeric-drift" in lines[0]
    assert len(lines) == len(EVENTS) - alarm.seq + 1
    assert Store(tmp_path / "empty.db").sessions() == []


def test_replay_cli_errors(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    _store_with(db, EVENTS).close()
    res = CliRunner().invoke(main, ["--db", str(db), "replay", SID, "--headless",
                                    "--from", "alarm:9"])
    assert res.exit_code != 0 and "has 5 alarms" in res.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"format": "portside-recording", "schema": 1, "session_id": "x",
                               "events": 2}) + "\n{}\n")
    res = CliRunner().invoke(main, ["replay", str(bad), "--headless"])
    assert res.exit_code != 0 and "bad.jsonl:2" in res.output
    res = CliRunner().invoke(main, ["--db", str(db), "replay", "nope", "--headless"])
    assert res.exit_code != 0 and "no session matches" in res.output


def test_replay_without_screen_falls_back(tmp_path: Path) -> None:
    import importlib.util

    if importlib.util.find_spec("portside.tui.replay_app") is not None:
        pytest.skip("the replay screen exists")
    db = tmp_path / "p.db"
    _store_with(db, EVENTS).close()
    res = CliRunner().invoke(main, ["--db", str(db), "replay", SID, "--speed", "0"])
    assert res.exit_code == 0
    assert "replay screen is not built yet" in res.output


def test_a_screen_opened_at_the_seek_reuses_its_state_and_structural_events() -> None:
    """The compact history at the point of the last seek, from the seek's own state and the
    replayer's structural events, equals one computed from scratch (and reads no state)."""
    from portside.core.replay.history import StructuralCache, compact_history

    events = _session(n_runs=6)
    fresh = Replayer(SequenceSource(events))
    rp = Replayer(SequenceSource(events))
    seq = rp.resolve_from("alarm:last") - 1
    state = rp.seek(seq)
    assert rp.seek_state is state
    # Ground truth: the structural events of the log, read by kind, not by the replayer.
    assert [e.seq for e in rp.structural_events] == [
        e.seq for e in events if e.__struct_config__.tag in STRUCTURAL_KINDS]
    calls = []
    rp.state_at = lambda s: calls.append(s) or Replayer.state_at(rp, s)  # type: ignore[method-assign]
    got = compact_history(rp, seq, StructuralCache(rp), rp.seek_state)
    empty = StructuralCache(fresh)
    empty.events = []  # read from the source, as before the replayer kept them
    want = compact_history(fresh, seq, empty, None)
    assert got == want
    assert calls == []  # the seek's state was used, not computed again
    # A stale state (the replay moved on) is not used.
    compact_history(rp, seq + 1, StructuralCache(rp), rp.seek_state)
    assert calls == [seq + 1]


def test_index_position_lists_match_a_scan_of_the_codes() -> None:
    """ReplayIndex sorts the codes once; each list must be exactly the positions a plain scan
    finds (ascending, nothing missing), for every kind and every union of kinds."""
    from collections.abc import Iterable

    import numpy as np

    from portside.core.replay.index import (
        KIND_CODE,
        KINDS,
        MARKER_KINDS,
        STRUCTURAL_KINDS,
        TRANSCRIPT_KINDS,
        IndexArrays,
        ReplayIndex,
    )

    rng = np.random.default_rng(3)
    for n in (0, 1, 5_000):
        codes = rng.integers(0, len(KINDS), n).astype(np.uint8)
        idx = ReplayIndex(IndexArrays(np.arange(1, n + 1), np.arange(n, dtype=float), codes))

        def scan(kinds: Iterable[str], codes: np.ndarray = codes) -> list[int]:
            want = {KIND_CODE[k] for k in kinds}
            return [i for i, c in enumerate(codes.tolist()) if c in want]

        for kind in MARKER_KINDS:
            assert idx.markers[kind].tolist() == scan([kind])
        assert idx.all_markers.tolist() == scan(MARKER_KINDS)
        assert idx.structural.tolist() == scan(STRUCTURAL_KINDS)
        assert idx.transcript.tolist() == scan(TRANSCRIPT_KINDS)
        assert idx.output.tolist() == scan(["run.output"])
        assert idx.records.tolist() == scan(["run.record"])
