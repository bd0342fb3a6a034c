"""An alarm's linked edit follows its likely cause (issue 27 item 5): the demo's drift and goal
alarms name `clipping-changed` in their evidence, and the report linked them to the last edit
(a signature fix, whose precision mark matches any drift) instead of the clipping edit. Ground
truth: the edit whose new text sets `max_norm=0.05`, found in the demo's own recording."""

from __future__ import annotations

from demo_edits import demo_edits

from portside.core.log import events as ev
from portside.store import Store
from portside.store.exports import report_md

SID = "link-1"


def test_report_links_drift_and_goal_to_the_edit_of_their_likely_cause(store: Store) -> None:
    edits = demo_edits(SID, 100.0)
    clip = next(e for e in edits if "max_norm=0.05" in e.after and "max_norm=0.05" not in e.before)
    assert clip is not edits[-1]
    rec = store.recorder
    rec.append(ev.SessionStarted(session_id=SID, ts=1.0, project="/p", target="xla:cpu"))
    for e in edits:
        rec.append(e)
        rec.append(ev.EditDecided(session_id=SID, ts=e.ts, edit_id=e.edit_id, decision="approved"))
        rec.append(ev.EditApplied(session_id=SID, ts=e.ts, edit_id=e.edit_id, path=e.path))
    for check in ("numeric-drift", "goal-regression"):
        rec.append(ev.AlarmRaised(session_id=SID, ts=300.0, alarm_id=f"a-{check}", check=check,
                                  severity="error", title=check, run_id="cand-1",
                                  evidence={"likely_causes": ["clipping-changed"]}))
    rec.flush()
    report = report_md(store, SID)
    links = [line for line in report.splitlines() if "linked edit" in line]
    assert len(links) == 2, report
    for line in links:
        assert f"({clip.edit_id})" in line and "clipping" in line, line
        assert f"({edits[-1].edit_id})" not in line
