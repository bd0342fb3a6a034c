"""`L` on the live screen: where did it diverge, for the selected alarm (issue 16).

A real engine runs a real reference and a candidate that tightens clipping; the reviewer selects
the clipping alarm and presses `L`; both commands run a few traced steps; the Checks column
names the first place they part (clipping) with both sides' statistics, and the answer is an
`alarm.localized` event in the SQLite log (so replay and the report show it too).
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest
from conftest import until

from portside.core.log import events as ev
from portside.core.session.config import SessionConfig
from portside.core.session.engine import SessionEngine
from portside.store import Store
from portside.tui.app import make_app
from portside.tui.widgets.checks import ChecksPanel

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "fixtures" / "trainers" / "train_tiny.py"


@pytest.mark.slow
async def test_l_localizes_the_selected_alarm_and_the_checks_column_shows_it(
        tmp_path: Path) -> None:
    store = Store(tmp_path / "l.db")
    base = f"{sys.executable} {TINY} --steps 40"
    config = SessionConfig(project=tmp_path, target="cpu", reference_command=base,
                           candidate_command=f"{base} --max-norm 0.05", reference_runs=1,
                           policy="ask", mode="live", workdir=tmp_path / "work", stall_s=120,
                           candidate_env={"OMP_NUM_THREADS": "1"})
    engine = SessionEngine(config, store.recorder)
    app = make_app(bus=engine.bus, gate=engine.gate, info=engine.info, engine_run=engine.run,
                   engine_stop=lambda: engine.stop("the reviewer closed portside"))
    model = app.model
    async with app.run_test(size=(160, 45)) as pilot:
        await until(pilot, lambda: any(a.event.check == "clipping-changed"
                                       for a in model.alarms.values()), timeout=240)
        alarm = next(a for a in model.alarms.values() if a.event.check == "clipping-changed")
        await until(pilot, lambda: app.live.query_one(ChecksPanel)._alarm_order, timeout=10)
        app.live.query_one(ChecksPanel).select(alarm.event.alarm_id)
        await pilot.press("L")
        await until(pilot, lambda: alarm.localized is not None, timeout=300)
        done = alarm.localized
        assert done is not None and not done.error, done
        assert done.divergence is not None and done.divergence["kind"] == "clip"
        await pilot.pause(0.3)
        evidence = str(app.live.query_one("#evidence").render())
        assert "⌖" in evidence and "clip" in evidence
        await pilot.press("L")  # asked again while it is known: the kept answer, never a crash
        await pilot.press("q")
    store.recorder.flush()
    store.close()
    conn = sqlite3.connect(tmp_path / "l.db")
    bodies = [r[0] for r in conn.execute("SELECT body FROM events WHERE kind = 'alarm.localized'")]
    conn.close()
    found = [ev.decode(b) for b in bodies]
    assert any(isinstance(e, ev.AlarmLocalized) and e.alarm_id == alarm.event.alarm_id
               and (e.divergence or {}).get("kind") == "clip" for e in found)
