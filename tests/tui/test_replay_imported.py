"""An imported Claude Code session on the replay screen: it plays to the end with the agent's
text, its diffs as decided (by the imported run, not a reviewer) and no interventions."""

from __future__ import annotations

from pathlib import Path

from cc_transcript import CLAIM, clipping_port
from conftest import until
from screen_text import screen_text

from portside.core.claude_code.transcript import read_claude_code
from portside.core.replay.player import Replayer
from portside.store import Store
from portside.store.jsonl import import_events
from portside.store.replay_source import StoreSource
from portside.tui.replay_app import make_replay_app
from portside.tui.screens.replay import ReplayScreen

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "trainers" / "train_tiny.py"


async def test_imported_claude_code_session_replays_on_screen(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "train.py").write_text(TINY.read_text(encoding="utf-8"), encoding="utf-8")
    s = clipping_port(project)
    events = read_claude_code(s.write(tmp_path / "t.jsonl"), target="tpu")
    store = Store(tmp_path / "p.db")
    try:
        sid = import_events(store, events)
        replayer = Replayer(StoreSource(store, sid), speed=1000)
        app = make_replay_app(replayer, session_id=sid, sink=store.recorder)
        async with app.run_test(size=(120, 41)) as pilot:
            await until(pilot, lambda: replayer.at_end and not app._inbox, timeout=30)
            for _ in range(3):
                await pilot.pause()
                app.live.flush()
            assert isinstance(app.screen, ReplayScreen)
            m = app.model
            assert {e.event.path: e.decided.decision for e in m.edits.values()
                    if e.decided is not None} == {"train.py": "approved",
                                                  "PORTING.md": "approved"}
            assert [(c.event.cwd, c.status) for c in m.commands.values()] == [(".", "approved")] * 2
            assert all(e.decided.by == "policy" for e in m.edits.values() if e.decided)
            assert m.interventions == [] and m.claim is not None
            assert m.claim.summary == CLAIM
            text = screen_text(app)
            assert "replay end" in text and "0 interventions" in text
            # Commands are numbered apart from the edits: two edits, not four.
            assert "edit 2 · 1 before PORTING.md" in text and "approved · applied" in text
    finally:
        store.close()
