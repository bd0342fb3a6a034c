"""The review screen's feed (cli/study_review.py's Follower) over a real database: a session
resumed after an interrupted end is followed live (that end is not the end), what waits is
folded from the log as it is committed, and the session's real end stops the feed."""

from __future__ import annotations

from pathlib import Path

from portside.cli.study_review import Follower
from portside.core.log import events as ev
from portside.store.queries import Store

SID = "20261202-000000-abcd"


def _add(store: Store, *events: ev.Event) -> None:
    for e in events:
        store.recorder.append(e)
    store.recorder.flush()


def test_follows_a_resumed_session_until_its_real_end(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    try:
        _add(store,
             ev.SessionStarted(session_id=SID, project="/p", target="cpu",
                               meta={"policy": "ask", "study": {"name": "s", "task": "t"}}),
             ev.EditProposed(session_id=SID, edit_id="e-old", path="train.py", before="a",
                             after="b"),
             ev.SessionEnded(session_id=SID, verdict="fail", outcome="interrupted",
                             reason="portside received the end of its stdin"),
             ev.SessionState(session_id=SID, state="resumed", detail="resumed"),
             ev.EditProposed(session_id=SID, edit_id="e-1", path="train.py", before="a",
                             after="c"))
        f = Follower(store, SID, tmp_path / "work" / "review-s.json")
        assert not f.ended
        # The edit proposed before the interruption waits no more; the resumed one does.
        assert [p.item_id for p in f.gate.pending_edits()] == ["e-1"]
        seen: list[str] = []
        f.bus.subscribe(lambda e: seen.append(type(e).__name__))
        _add(store, ev.EditDecided(session_id=SID, edit_id="e-1", decision="approved"),
             ev.AgentClaimed(session_id=SID, summary="done"))
        assert [type(e).__name__ for e in f.catch_up()] == ["EditDecided", "AgentClaimed"]
        assert seen == ["EditDecided", "AgentClaimed"]
        assert not f.gate.pending_edits() and f.gate.pending_claim() is not None
        assert not f.ended
        _add(store, ev.SessionEnded(session_id=SID, verdict="pass", outcome="passed"))
        f.catch_up()
        assert f.ended and f.gate.pending_claim() is None
    finally:
        store.close()
