"""The replay screen: fidelity with the live screen, its keys, a snapshot, seeks on a long log.

Fidelity (the issue's Must-show): a session recorded by the real engine (scripted agent, real
runs of the tiny trainer, real SQLite) is opened live over its full log and replayed at speed
1000 to the end; the models and the rendered screens must be equal, except the header's mode
field (live vs replay, speed, position) and the footer (replay has its own keys).
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import FROZEN, type_text, until
from doubles import MemorySink
from scenario import INFO, SID, at, full_session
from screen_text import screen_lines

from portside.core.log import events as ev
from portside.core.log.bus import EventBus
from portside.core.replay.index import SequenceSource
from portside.core.replay.player import Replayer
from portside.core.session.review import ReviewGate
from portside.store import Store
from portside.store.replay_source import StoreSource
from portside.tui.app import make_app
from portside.tui.model import SessionModel
from portside.tui.replay_app import ReplayApp, make_replay_app
from portside.tui.screens.dialogs import TextDialog
from portside.tui.screens.replay import ReplayScreen
from portside.tui.widgets.checks import ChecksPanel
from portside.tui.widgets.runs import RunsPanel

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "fixtures" / "trainers" / "train_tiny.py"
LIVE_SIZE = (120, 40)
REPLAY_SIZE = (120, 41)  # one more row for the timeline: the columns get the same height


# --- helpers --------------------------------------------------------------------------------


def model_data(m: SessionModel) -> dict[str, Any]:
    """Everything the widgets read from the model, as plain data."""
    return {
        "state": m.state,
        "ended": ev.encode(m.ended) if m.ended else None,
        "runs": {rid: {"label": r.label, "finished": ev.encode(r.finished) if r.finished else None,
                       "lines": [r.lines[i] for i in range(len(r.lines))],
                       "last_step": r.last_step, "facts": r.facts,
                       "losses": list(r.losses), "steps": list(r.step_ids)}
                 for rid, r in m.runs.items()},
        "alarms": {aid: (a.event.seq, a.acknowledged, a.cleared) for aid, a in m.alarms.items()},
        "edits": {eid: (e.event.seq, e.status) for eid, e in m.edits.items()},
        "interventions": [i.seq for i in m.interventions],
        "claim": m.claim.seq if m.claim else None,
        "spend": (round(m.compute_usd(), 9), round(m.token_usd, 9), round(m.human_minutes(), 9)),
        "attempts": m.attempts(),
    }


_MODE = re.compile(r"  (live|replay) .*?(?= \d\d:\d\d:\d\d  attempt)")


def comparable(lines: list[str], *, replay: bool) -> list[str]:
    """Header (mode field blanked) + columns; the replay's timeline and both footers dropped."""
    lines = list(lines)
    if replay:
        del lines[2]  # the timeline
    out = [_mask_log(line.rstrip()) for line in lines[:-1]]
    out[0] = _MODE.sub("  <mode>", out[0])
    return out


def _mask_log(line: str) -> str:
    """Blank the Runs column's body below its status line: which lines a log viewport shows
    depends on when it last followed the tail (batching differs between live and replay).
    Every log line is compared exactly through the models instead."""
    parts = line.split("││")
    if len(parts) == 3 and (parts[1].startswith("step=") or parts[1].startswith(" ")
                            or parts[1][:1].isalnum() or parts[1].startswith("$")):
        parts[1] = "<log>"
    return "││".join(parts)


async def settle(pilot: Any, tail: bool = False) -> None:
    """Redraw everything now, twice (tab labels and the chart settle on the next tick).
    ``tail``: put every run log at its tail first. LogView can drop out of follow mode when a
    resize lands between two batches (tui/widgets/log_view.py watch_scroll_y), and live and
    replay batch differently; the models are compared apart, exactly."""
    if tail:
        for pane in pilot.app.live.query_one(RunsPanel).panes.values():
            pane.action_tail()
    for _ in range(3):
        await pilot.pause()
        pilot.app.live.flush()
    await pilot.pause()


# --- a session recorded by the real engine --------------------------------------------------


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict[str, Any]]:
    """A scripted agent session on the tiny trainer: one reference run, an edit that changes
    clipping, a candidate run, a claim; the reviewer writes a note and acknowledges an alarm."""
    from portside.core.agent.scripted import ScriptedAgent
    from portside.core.session.config import SessionConfig
    from portside.core.session.engine import SessionEngine

    tmp = tmp_path_factory.mktemp("recorded")
    project = tmp / "tiny"
    project.mkdir()
    shutil.copy(TINY, project / "train.py")
    script = tmp / "agent.jsonl"
    script.write_text("\n".join(json.dumps(x) for x in [
        {"say": "Porting train.py; first a look at the loop."},
        {"read": "train.py"},
        {"edit": {"path": "train.py",
                  "old": 'p.add_argument("--max-norm", type=float, default=1.0)',
                  "new": 'p.add_argument("--max-norm", type=float, default=0.05)',
                  "rationale": "clip harder"}},
        {"run": "candidate"},
        {"claim": "Ported; numerics unchanged."},
    ]) + "\n")
    db = tmp / "s.db"
    store = Store(db)
    config = SessionConfig(project=project, target="cpu",
                           reference_command=f"{sys.executable} train.py --steps 30",
                           reference_runs=1, agent=ScriptedAgent(script, speed=0),
                           policy="auto", mode="live", isolate=True, workdir=tmp / "work",
                           stall_s=60, reviewer="tester")
    engine = SessionEngine(config, store.recorder)

    seen: list[str] = []
    engine.bus.subscribe(lambda e: seen.append(e.__struct_config__.tag))

    async def reviewer() -> None:
        # A human in the loop: a note once a run starts, an ack once an alarm is up.
        noted = False
        for _ in range(2400):
            if not noted and "run.started" in seen:
                engine.gate.note("watching the reference run")
                noted = True
            unacked = engine.gate.unacknowledged()
            if noted and unacked:
                engine.gate.acknowledge(unacked[0].alarm_id)
                return
            if engine.result is not None and "session.ended" in seen and noted:
                return
            await asyncio.sleep(0.05)

    async def main() -> None:
        await asyncio.gather(engine.run(), reviewer())

    asyncio.run(main())
    info = dict(engine.info)
    store.close()
    return db, engine.session_id, info


@pytest.mark.slow  # a whole live session with real runs, then its replay
class TestReplayFidelity:
    async def test_replay_at_speed_1000_ends_as_the_live_screen(
            self, recorded: tuple[Path, str, dict[str, Any]]) -> None:
        db, sid, info = recorded
        store = Store(db)
        try:
            history = list(store.events(sid))
            kinds = {e.__struct_config__.tag for e in history}
            assert {"edit.proposed", "run.finished", "alarm.raised", "intervention",
                    "agent.claimed", "session.ended"} <= kinds
            live_bus = EventBus(MemorySink())
            live = make_app(bus=live_bus, gate=ReviewGate(live_bus, sid, reviewer="tester"),
                            info=info, history=history, clock=lambda: FROZEN)
            async with live.run_test(size=LIVE_SIZE) as pilot:
                await settle(pilot, tail=True)
                live_model = model_data(live.model)
                live_lines = screen_lines(live)

            replayer = Replayer(StoreSource(store, sid), speed=1000)
            app = make_replay_app(replayer, session_id=sid, sink=store.recorder)
            async with app.run_test(size=REPLAY_SIZE) as pilot:
                await until(pilot, lambda: replayer.at_end and not app._inbox, timeout=30)
                await settle(pilot, tail=True)
                assert isinstance(app.screen, ReplayScreen)
                replay_model = model_data(app.model)
                replay_lines = screen_lines(app)
                assert replay_model == live_model
                assert comparable(replay_lines, replay=True) == comparable(live_lines,
                                                                           replay=False)
                assert "replay end ×1000" in replay_lines[0]

                # A far seek rebuilds from the compact history; this session is small enough
                # for every run to be rebuilt whole, so the end state is the same again.
                await pilot.press("0")
                await until(pilot, lambda: replayer.position == 0 and not app.model.runs)
                await pilot.press("dollar_sign")
                await until(pilot, lambda: replayer.position == replayer.index.last_seq)
                await settle(pilot, tail=True)
                assert model_data(app.model) == live_model
                assert comparable(screen_lines(app), replay=True) == comparable(
                    live_lines, replay=False)
        finally:
            store.close()


# --- keys -----------------------------------------------------------------------------------


def _scenario_events() -> list[ev.Event]:
    sink = MemorySink()
    events = [sink.append(e) for e in full_session()]
    note = ev.Intervention(session_id=SID, ts=at(33), intervention_id="i-1", action="note",
                           steering=False, attention_started_at=at(32.5), decided_at=at(33),
                           reviewer="tester", note="looks off")
    events.append(sink.append(note))
    events.append(sink.append(ev.SessionEnded(session_id=SID, ts=at(40), verdict="fail",
                                              outcome="failed-silent", reason="clipping")))
    return events


@pytest.fixture
def scenario_db(tmp_path: Path) -> tuple[Store, Path]:
    db = tmp_path / "replay.db"
    store = Store(db)
    for e in _scenario_events():
        e.seq = 0
        store.recorder.append(e)
    store.recorder.flush()
    yield store, db
    store.close()


class TestReplayKeys:
    async def test_play_speed_step_markers_and_edges(self, scenario_db: tuple[Store, Path]
                                                     ) -> None:
        store, _ = scenario_db
        replayer = Replayer(StoreSource(store, SID), speed=1)
        app = make_replay_app(replayer, session_id=SID, sink=store.recorder, autoplay=False)
        async with app.run_test(size=REPLAY_SIZE) as pilot:
            await pilot.pause()
            assert not replayer.playing and replayer.position == 0
            await pilot.press("space")
            assert replayer.playing
            await pilot.press("plus", "plus")
            assert replayer.speed == 4 and replayer.playing
            await pilot.press("minus")
            assert replayer.speed == 2
            await pilot.press("space")
            assert not replayer.playing
            await pilot.press("0")
            await until(pilot, lambda: replayer.position == 0)
            await pilot.press("full_stop")
            assert replayer.position == 1 and not replayer.playing
            await pilot.press("full_stop")
            assert replayer.position == 2
            await until(pilot, lambda: len(app.live.query_one("#transcript").children) >= 1)

            markers = [s for s, _, _ in replayer.markers()]
            alarms = [s for s, _, k in replayer.markers() if k == "alarm.raised"]
            notes = [s for s, _, k in replayer.markers() if k == "intervention"]
            await pilot.press("right_square_bracket")
            assert replayer.position == markers[0]
            await pilot.press("right_square_bracket")
            assert replayer.position == markers[1]
            await pilot.press("left_square_bracket")
            assert replayer.position == markers[0]
            await pilot.press("A")
            await until(pilot, lambda: replayer.position == alarms[0])
            await until(pilot, lambda: "a-clip" in app.model.alarms)
            await pilot.press("A")
            assert replayer.position == alarms[1]
            await pilot.press("I")
            assert replayer.position == notes[0]
            await until(pilot, lambda: len(app.model.interventions) == 1)
            await pilot.press("dollar_sign")
            await until(pilot, lambda: replayer.position == replayer.index.last_seq
                        and app.model.ended is not None)
            await pilot.press("0")
            await until(pilot, lambda: replayer.position == 0 and not app.model.alarms)

            # g: a seq, then a time (seconds since the first event)
            await pilot.press("g")
            await until(pilot, lambda: isinstance(app.screen, TextDialog))
            await type_text(pilot, "12")
            await pilot.press("enter")
            await until(pilot, lambda: replayer.position == 12)
            assert set(app.model.runs) == {"ref-1"}
            await pilot.press("g")
            await until(pilot, lambda: isinstance(app.screen, TextDialog))
            await type_text(pilot, "t 30.5")
            await pilot.press("enter")
            await until(pilot, lambda: replayer.position == alarms[0])

    async def test_n_records_a_review_note_and_action_keys_only_notify(
            self, scenario_db: tuple[Store, Path]) -> None:
        store, db = scenario_db
        replayer = Replayer(StoreSource(store, SID), speed=1)
        app = make_replay_app(replayer, session_id=SID, sink=store.recorder, autoplay=False,
                              reviewer="tester")
        shown: list[str] = []
        async with app.run_test(size=REPLAY_SIZE) as pilot:
            await pilot.press("dollar_sign")
            await until(pilot, lambda: app.model.ended is not None)
            before = len(app.model.interventions)
            original = app.notify

            def spy(message: str, **kw: Any) -> None:
                shown.append(message)
                original(message, **kw)

            app.notify = spy  # type: ignore[method-assign]
            app.live.notify = spy  # type: ignore[method-assign]
            for key in ("a", "r", "e", "m", "k", "o", "R", "x", "v"):
                await pilot.press(key)
                await pilot.pause()
                assert not isinstance(app.screen, TextDialog), key
            assert len([s for s in shown if "off in replay" in s]) == 9
            await pilot.press("n")
            await until(pilot, lambda: isinstance(app.screen, TextDialog))
            await type_text(pilot, "clipping alarm was right")
            await pilot.press("enter")
            await until(pilot, lambda: any("note saved" in s for s in shown))
            # The replayed screen is unchanged by the note (it is not part of the replay).
            assert len(app.model.interventions) == before
        conn = sqlite3.connect(db)
        conn.row_factory = sqlite3.Row
        rows = [dict(r) for r in conn.execute(
            "SELECT * FROM interventions WHERE session_id = ? ORDER BY seq", (SID,))]
        conn.close()
        assert [r["action"] for r in rows] == ["note", "review-note"]
        note = rows[-1]
        assert note["during_replay"] == 1 and note["note"] == "clipping alarm was right"
        assert note["reviewer"] == "tester"
        assert note["attention_started_at"] <= note["decided_at"]


# --- snapshot -------------------------------------------------------------------------------


def _snapshot_app() -> ReplayApp:
    events = _scenario_events()
    replayer = Replayer(SequenceSource(events), speed=8, clock=lambda: 0.0)
    replayer.seek(events[-3].seq)  # the slow alarm: every run and alarm is on screen
    return make_replay_app(replayer, session_id=SID, info=dict(INFO), autoplay=False)


class TestReplaySnapshot:
    def test_replay_screen_with_timeline(self, snap_compare: Any) -> None:
        async def before(pilot: Any) -> None:
            await pilot.pause()
            pilot.app.live.query_one(ChecksPanel).select("a-clip")
            await settle(pilot)

        assert snap_compare(_snapshot_app(), run_before=before, terminal_size=REPLAY_SIZE)


# --- seeks on a long session ----------------------------------------------------------------


def _long_session(n: int) -> list[ev.Event]:
    from bench.bench_replay import synthetic_events

    return list(synthetic_events(n, session_id="long"))


@pytest.mark.slow  # a long session folded at every seek
class TestSeekLongSession:
    async def test_seeks_land_on_the_folded_state(self) -> None:
        events = _long_session(100_000)
        replayer = Replayer(SequenceSource(events), speed=1)
        app = make_replay_app(replayer, session_id="long", autoplay=False)

        def structural(m: SessionModel) -> dict[str, Any]:
            d = model_data(m)
            for r in d["runs"].values():
                del r["lines"], r["losses"], r["steps"]
            return d

        # The reference: one fold of the whole log, read at each target on the way.
        alarms = [e.seq for e in events if isinstance(e, ev.AlarmRaised)]
        running = next(e.seq for e in events if isinstance(e, ev.RunStarted)
                       and e.seq > alarms[-1])
        targets = [alarms[-1], min(running + 30_000, len(events) - 5), 40_000, 7, 50_500,
                   len(events)]
        want: dict[int, tuple[dict[str, Any], dict[str, list[str]], dict[str, float]]] = {}
        m = SessionModel({"session_id": "long"})
        for e in events:
            m.apply(e)
            if e.seq in targets:
                want[e.seq] = (structural(m),
                               {rid: [r.lines[i] for i in range(len(r.lines))]
                                for rid, r in m.runs.items()},
                               {rid: r.losses[-1] for rid, r in m.runs.items() if r.losses})

        async with app.run_test(size=REPLAY_SIZE) as pilot:
            await pilot.pause()
            for seq in targets[:-2] + targets[-1:]:
                await app.seek(seq)
                await pilot.pause()
                got = app.model
                assert replayer.position == seq
                data, lines, losses = want[seq]
                assert structural(got) == data, seq
                for rid, run in got.runs.items():
                    full = lines[rid]
                    # The log ends as the folded one does; a cut log says its count is a floor.
                    tail = [run.lines[i] for i in range(len(run.lines))]
                    assert tail == full[len(full) - len(tail):], rid
                    assert run.lines_elided == (len(tail) < len(full)), rid
                    if rid in losses:
                        assert run.losses[-1] == losses[rid]
            # A seek a little ahead plays the events in between instead.
            await app.seek(50_000)
            await app.seek(50_500)
            await until(pilot, lambda: not app._inbox)
            await pilot.pause()
            assert structural(app.model) == want[50_500][0]


class TestReplayHeader:
    async def test_header_stays_on_its_two_lines_at_120_columns(self) -> None:
        """The demo's values (a long project name, session id, seq and status) at 120×40: the
        header's first line fits (the session id gives way first), never wrapped onto the spend
        line."""
        long_sid = "20260413-101530-a1b2c3d4-demo-session"
        events = _scenario_events()
        for e in events:
            e.session_id = long_sid
        info = dict(INFO, project="/home/someone/projects/synthetic-clusters-cuda-project",
                    target="xla:cpu")
        replayer = Replayer(SequenceSource(events), speed=8, clock=lambda: 0.0)
        replayer.seek(events[-1].seq)
        app = make_replay_app(replayer, session_id=long_sid, info=info, autoplay=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(pilot)
            lines = screen_lines(app)
        # The session id gives way first, so the mode, clock and attempt stay (they were cut).
        assert lines[0].startswith(" portside ") and "attempt 1/10" in lines[0], lines[:3]
        assert lines[1].startswith(" spend "), lines[:3]
        assert "✖ alarm" in lines[2] or "alarm" in lines[2], lines[:3]  # the timeline follows
