"""The replay's first frame read from the store's cache of it (store/replay_frames.py).

Ground truth is the log itself: the events read straight from SQLite (their rows decoded here)
and folded by the reference fold, never the cache or the screen. A cache that no longer holds
(events appended after it was written) or that is damaged must not be drawn: the frame then
comes from the events, and is the same as a fresh open's.
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path
from typing import Any

from conftest import until
from screen_text import screen_lines

from portside.core.log import events as ev
from portside.core.replay.opening import PendingOpening
from portside.core.replay.player import DEFAULT_IDLE_LIMIT, Replayer, parse_from
from portside.core.replay.state import ReplayState, fold
from portside.store import Store
from portside.store.codec import ROW_COLUMNS, decode_row
from portside.store.projections import Batch
from portside.store.replay_frames import FrameCache, _tag, frame_key, point_key, warm_frames
from portside.store.replay_source import StoreSource
from portside.tui.replay_app import make_replay_app
from portside.tui.widgets.runs import RunPane

REPO = Path(__file__).resolve().parents[2]
SIZE = (120, 40)
SID = "cached"
POINT = point_key(parse_from("alarm:last"), DEFAULT_IDLE_LIMIT)


def _events(n: int) -> list[ev.Event]:
    from bench.bench_replay import synthetic_events

    return list(synthetic_events(n, session_id=SID, run_events=(8, 12)))


def _append(store: Store, events: list[ev.Event]) -> None:
    conn = store.conn
    batch = Batch()
    for e in events:
        batch.add(e, ev.encode(e))
    conn.execute("BEGIN IMMEDIATE")
    batch.write(conn)
    conn.execute("COMMIT")


def _from_sqlite(db: Path) -> list[ev.Event]:
    """The session's events as SQLite holds them, in seq order."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute(f"SELECT {ROW_COLUMNS} FROM events WHERE session_id = ? ORDER BY seq",
                            (SID,)).fetchall()
    return [decode_row(*r) for r in rows]


def _truth(db: Path) -> tuple[int, ReplayState]:
    """Where `--from alarm:last` opens (the event before the last alarm: it plays first) and
    the reference fold of every event up to there."""
    events = _from_sqlite(db)
    point = max(e.seq for e in events if isinstance(e, ev.AlarmRaised)) - 1
    return point, fold(e for e in events if e.seq <= point)


def _opening(store: Store) -> PendingOpening:
    """As `portside replay SESSION --from alarm:last` opens it (cli/exports.py)."""
    source = StoreSource(store, SID)

    def build() -> Replayer:
        replayer = Replayer(source, idle_limit=DEFAULT_IDLE_LIMIT)
        replayer.seek(replayer.resolve_from("alarm:last") - 1)
        return replayer

    return PendingOpening(source, build, FrameCache(store, SID, POINT))


async def _first_frame(store: Store) -> dict[str, Any]:
    """The first frame that shows the session, and what the screen held when it was drawn."""
    opening = _opening(store)
    app = make_replay_app(opening, session_id=SID, autoplay=False)
    got: dict[str, Any] = {}
    display = app._display

    def seen(screen: Any, renderable: Any) -> None:
        display(screen, renderable)
        if (not got and renderable is not None and screen is app.screen and app.model.runs
                and not app._batch_count):
            got.update(lines=screen_lines(app), loaded=app.loaded,
                       runs={k: (r.finished.outcome if r.finished else "running")
                             for k, r in app.model.runs.items()},
                       alarms=sorted(app.model.alarms), shown=app._shown_offset(),
                       **{"newest tab": RunPane.tab_label(list(app.model.runs.values())[-1])})

    app._display = seen  # type: ignore[method-assign]
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: got and app.loaded and opening.drawn.is_set())
        got.update(from_cache=opening.from_cache, position=app.replayer.position,
                   last_seq=app.replayer.index.last_seq,
                   offset=app.replayer.offset_of(app.replayer.position))
    return got


def _check(frame: dict[str, Any], point: int, truth: ReplayState) -> None:
    text = "\n".join(frame["lines"])
    assert frame["position"] == point
    assert f"seq {point}/{frame['last_seq']}" in frame["lines"][0], frame["lines"][:2]
    assert frame["runs"] == {k: r.outcome for k, r in truth.runs.items()}
    assert frame["alarms"] == sorted(truth.alarms)
    n_open = len(truth.open_alarms())
    assert f"{n_open} open alarm" in text, frame["lines"][:3]
    newest = list(truth.runs.values())[-1]
    assert frame["newest tab"] in text  # the newest run's tab, selected
    # The newest run's log, as the log has it, on screen: its last line.
    assert newest.tail and newest.tail[-1] in text, (newest.tail[-1], frame["lines"])
    assert abs(frame["shown"] - frame["offset"]) < 1e-9  # the timeline's cursor


class TestCachedFirstFrame:
    async def test_a_cached_frame_is_drawn_before_the_replayer_and_shows_the_log_at_the_point(
            self, tmp_path: Path) -> None:
        db = tmp_path / "s.db"
        store = Store(db)
        _append(store, _events(2_000))
        assert warm_frames(store, SID) == 2  # the start and the last alarm, as a session's end
        point, truth = _truth(db)
        frame = await _first_frame(store)
        assert frame["from_cache"], "the frame was not read from the cache"
        assert not frame["loaded"], "the replayer was built before the first frame"
        _check(frame, point, truth)
        store.close()

    async def test_a_stale_frame_is_not_used_and_is_written_again(self, tmp_path: Path) -> None:
        db = tmp_path / "s.db"
        store = Store(db)
        events = _events(3_000)
        alarms = [e.seq for e in events if isinstance(e, ev.AlarmRaised)]
        cut = alarms[len(alarms) // 2]  # half the session, then the rest after the cache
        _append(store, events[:cut])
        warm_frames(store, SID)
        assert FrameCache(store, SID, POINT).load() is not None
        _append(store, events[cut:])  # later runs and alarms: the cached point is not the last
        cache = FrameCache(store, SID, POINT)
        assert cache.load() is None and cache.miss.startswith("stale"), cache.miss
        point, truth = _truth(db)
        assert point > cut
        frame = await _first_frame(store)
        assert not frame["from_cache"]
        _check(frame, point, truth)
        # Kept again once drawn, for the log as it is now.
        await _wait_written(store, point)
        store.close()

    async def test_a_corrupt_frame_falls_back_to_the_events(self, tmp_path: Path) -> None:
        db = tmp_path / "s.db"
        store = Store(db)
        _append(store, _events(2_000))
        warm_frames(store, SID)
        point, truth = _truth(db)
        conn = store.conn
        blob = bytes(conn.execute("SELECT frame FROM replay_frames WHERE point = ?",
                                  (POINT,)).fetchone()[0])
        # A byte changed (its tag no longer matches), a row whose plain sha256 matches a body
        # that is not a frame (the tag is keyed: refused), and one whose keyed tag matches
        # such a body: none may be drawn.
        # The byte: a digit of an older run's kept log tail, so the row still decodes, as a
        # frame that is wrong.
        at = blob.rindex(b"Loss: ") + len(b"Loss: 0.")
        flipped = blob[:at] + bytes([blob[at] ^ 0x01]) + blob[at + 1:]
        garbage = b'{"format": 2, "position": "x"}'
        last = conn.execute("SELECT last_seq, last_ts, last_kind FROM replay_frames"
                            " WHERE point = ?", (POINT,)).fetchone()
        keyed = _tag(frame_key(db), SID, POINT, tuple(last), garbage)
        for body, digest, why in ((flipped, None, "refused"),
                                  (garbage, hashlib.sha256(garbage).hexdigest(), "refused"),
                                  (garbage, keyed, "unreadable")):
            conn.execute("UPDATE replay_frames SET frame = ?"
                         + (", sha256 = ?" if digest else "") + " WHERE point = ?",
                         (body, digest, POINT) if digest else (body, POINT))
            cache = FrameCache(store, SID, POINT)
            assert cache.load() is None and cache.miss.startswith(why), cache.miss
            frame = await _first_frame(store)
            assert not frame["from_cache"], why
            _check(frame, point, truth)
            await _wait_written(store, point)  # repaired: the next open reads it
        store.close()


async def _wait_written(store: Store, point: int) -> None:
    import asyncio

    for _ in range(400):
        frame = FrameCache(store, SID, POINT).load()
        if frame is not None and frame.position == point:
            return
        await asyncio.sleep(0.025)
    raise AssertionError("the frame was not written again after the open")
