"""At 120 columns (issue 27 item 8): the sessions table shows every count and the verdict, the
replay's header keeps its mode, clock and attempt, its footer keeps Help and Quit. Snapshots,
plus the same facts read from the screen's plain text (what a bug would cut)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scenario import INFO, SID, T0
from screen_text import screen_lines
from test_replay_screen import _scenario_events, settle

from portside.core.log import events as ev
from portside.core.replay.index import SequenceSource
from portside.core.replay.player import Replayer
from portside.store import Store
from portside.tui.replay_app import make_replay_app
from portside.tui.sessions_app import SessionsApp
from portside.tui.widgets.checks import ChecksPanel

SIZE = (120, 40)


def _sessions(tmp: Path) -> list[dict[str, Any]]:
    """Three sessions as `portside demo` and `run` record them: real ids, a scripted agent's
    path, interventions, a verdict."""
    with Store(tmp / "s.db") as store:
        rec = store.recorder
        for n, (verdict, agent) in enumerate((
                ("fail", "scripted:/work/portside/sessions/demo/agent.jsonl"),
                ("pass", "claude-code:claude-sonnet-4-5"), ("", "none"))):
            sid, t = f"2026120{n + 1}-031829-fe8{n}", T0 + 3600 * n
            rec.append(ev.SessionStarted(session_id=sid, ts=t, project="/work/demo/project",
                                         target="xla:cpu", agent=agent))
            rec.append(ev.Intervention(session_id=sid, intervention_id=f"i{n}", action="approve",
                                       steering=False, attention_started_at=t + 10,
                                       decided_at=t + 40))
            if verdict:
                rec.append(ev.SessionEnded(session_id=sid, ts=t + 600, verdict=verdict))
        rec.flush()
        rows = store.sessions()
    for r in rows:
        r["compute_usd"] = 0.42
    return rows


def test_sessions_table_fits_120(snap_compare: Any, tmp_path: Path) -> None:
    seen: list[str] = []

    async def before(pilot: Any) -> None:
        await pilot.pause()
        seen.extend(screen_lines(pilot.app))

    assert snap_compare(SessionsApp(_sessions(tmp_path), "portside.db"), run_before=before,
                        terminal_size=SIZE)
    head = next(line for line in seen if "session" in line and "verdict" in line)
    for title in ("interv.", "human min", "total $", "verdict"):
        assert title in head, head
    row = next(line for line in seen if "20261201-031829-fe80" in line)
    assert "fail" in row and "0.5" in row and "0.42" in row, row  # verdict, human min, cost


def test_replay_header_and_footer_fit_120(snap_compare: Any) -> None:
    """A long project name and xla:cpu (the demo's own header was cut after its position)."""
    info = {**INFO, "project": "/work/demo/synthetic-clusters", "target": "xla:cpu"}
    events = _scenario_events()
    replayer = Replayer(SequenceSource(events), speed=8, clock=lambda: 0.0)
    replayer.seek(events[-3].seq)
    app = make_replay_app(replayer, session_id=SID, info=info, autoplay=False)
    seen: list[str] = []

    async def before(pilot: Any) -> None:
        await pilot.pause()
        pilot.app.live.query_one(ChecksPanel).select("a-clip")
        await settle(pilot)
        seen.extend(screen_lines(pilot.app))

    assert snap_compare(app, run_before=before, terminal_size=SIZE)
    header, footer = seen[0], seen[-1]
    assert "replay" in header and "attempt 1/10" in header and "…" not in header, header
    assert "? Help" in footer and "q Quit" in footer, footer
