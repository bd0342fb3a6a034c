"""Human time is the reviewer's busy time: overlapping windows count once (issue 27 item 6).

Ground truth is wall-clock arithmetic on the windows, not the code under test: the issue's ack
21:46:28 → 21:47:05 and verdict 21:46:37 → 21:47:26 cover 21:46:28 → 21:47:26, 58 s (their
spans sum to 86 s). Exports still carry each window."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest

from portside.core.log import events as ev
from portside.core.log.busy_time import BusyWindows, union_seconds
from portside.core.log.ledger import fold
from portside.store import Store
from portside.store.exports import intervention_rows, stats

SID = "busy-1"


def _t(hms: str) -> float:
    return datetime.fromisoformat(f"2026-11-30T{hms}+00:00").astimezone(UTC).timestamp()


def _acts() -> list[ev.Event]:
    return [
        ev.SessionStarted(session_id=SID, project="/p", target="xla", ts=_t("21:40:00")),
        ev.Intervention(session_id=SID, intervention_id="i-ack", action="acknowledge-alarm",
                        steering=False, attention_started_at=_t("21:46:28"), decided_at=_t("21:47:05"),
                        target_id="a1"),
        ev.Intervention(session_id=SID, intervention_id="i-verdict", action="verdict",
                        steering=False, attention_started_at=_t("21:46:37"), decided_at=_t("21:47:26"),
                        verdict="fail", note="clipping"),
        ev.SessionEnded(session_id=SID, verdict="fail", reason="reviewer: clipping",
                        ts=_t("21:47:27")),
    ]


def test_overlapping_windows_count_once_in_ledger_view_and_stats(store: Store) -> None:
    events = _acts()
    for n, e in enumerate(events, 1):
        e.seq = n
    assert fold(events).human_s == pytest.approx(58.0)
    for e in _acts():
        store.recorder.append(e)
    store.recorder.flush()
    view = store.session(SID)  # the SQL view Datasette users read
    assert view["human_s"] == pytest.approx(58.0)
    data = stats(store)  # no candidate run here: listed apart from the migrations (41.7)
    row = (data["sessions"] + data["abandoned"])[0]
    assert row["human_minutes"] == pytest.approx(58.0 / 60)
    # ... while the export keeps each intervention's own window.
    spans = sorted(r["attention_seconds"] for r in intervention_rows(store, [SID]))
    assert spans == [pytest.approx(37.0), pytest.approx(49.0)]


def test_union_matches_covered_seconds_on_random_windows() -> None:
    rng = random.Random(7)
    for _ in range(300):
        wins = [(a, a + rng.randint(-3, 12)) for a in (rng.randint(0, 60) for _ in range(8))]
        covered = {t for a, b in wins for t in range(a, b)}  # whole seconds, counted by hand
        busy = BusyWindows()
        for a, b in wins:
            busy.add(a, b)
        assert busy.seconds == len(covered) == union_seconds(wins), wins


def test_nan_and_backwards_windows_count_nothing() -> None:
    assert union_seconds([(5.0, float("nan")), (10.0, 4.0), (0.0, 1.5)]) == pytest.approx(1.5)
