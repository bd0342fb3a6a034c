"""`portside replay` on screen: the live screen fed by a :class:`~portside.core.replay.player.Replayer`.

    app = make_replay_app(replayer, session_id=sid, sink=store.recorder)

Playing: a UI timer takes the events whose time has come (``due(limit)``: bounded batches, the
UI never waits on the replay) and hands them to ``bus.deliver_only``: the same path, the same
fold and the same widgets as a live session, so a replay played to its end shows what the live
screen showed.

Opening: the first frame (the --from point's compact history, the timeline, the header's
position) comes from a thread (``core/replay/opening.py``) begun before the screen: read from
the store's cache of it, or derived from the replayer built there. The mount waits for it,
holding frames, up to LOADING_FRAME_S: the first frame is then the session at its point. A
frame still out by then gets the layout drawn, the timeline saying "loading…" (the screen is
never blank for long), and is folded when it lands. A cached frame is drawn before the
replayer is built; keys that need the replayer wait for it (a notice says so).

Seeking never folds from the first event. A far jump folds the *compact history* of the target
point (``core/replay/history.py``) into a fresh screen. A jump a little ahead (≤ FORWARD_LIMIT
events) just plays the events in between.

Review notes (`n`) go through a gate on a bus of their own whose sink is the store's recorder:
stored durably as ``review-note`` interventions with ``during_replay`` set; the replayed events
never touch the store.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import re
from concurrent.futures import wait
from typing import Any

import numpy as np
from textual.screen import Screen

from portside.core.log import events as ev
from portside.core.log.bus import EventBus, Sink
from portside.core.replay.first_frame import FirstFrame
from portside.core.replay.history import History, StructuralCache, compact_history, session_info
from portside.core.replay.opening import PendingOpening
from portside.core.replay.player import Replayer
from portside.core.replay.state import ReplayState
from portside.core.session.review import ReviewGate

from .app import PortsideApp
from .model import SessionModel
from .screens.replay import ReplayScreen, speed_label
from .widgets.agent_column import AgentColumn

PUMP_S = 1 / 30  # how often the timer looks for due events
BATCH = 2_000  # events folded per timer tick at most: a fast replay stays responsive
FORWARD_LIMIT = 2_000  # a jump at most this far ahead plays the events in between
MIN_SPEED, MAX_SPEED = 1 / 64, 4096.0
# The app's warm-up (tui/app.py) holds the GIL for ~0.4 s: begun this long after the load, it
# does not delay the first frame, even on a busy machine.
WARM_UP_AFTER_S = 2.0
# How long the mount waits for the opening before it draws the layout with "loading…" (a
# loading frame costs a layout and a paint of the whole screen that the session's frame pays
# again). A 1M-event session opens in ~0.2 s; the screen used to stay blank ~0.5 s.
LOADING_FRAME_S = 0.4
# Kinds that only show in the Agent column: before the transcript window they feed the model
# alone (the header still counts them), so a seek mounts a bounded number of widgets.
_TRANSCRIPT_ONLY = (ev.AgentClaimed, ev.EditProposed, ev.CommandProposed, ev.EditDecided,
                    ev.EditApplied, ev.Intervention, ev.SessionState)


# --- the app --------------------------------------------------------------------------------


class ReplayApp(PortsideApp):
    """PortsideApp whose events come from a Replayer; its screen is a ReplayScreen."""

    live: ReplayScreen  # every screen this app shows is a replay one (_new_screen)
    # Set when the opening lands (_start); nothing reads them before (see ``loaded``).
    replayer: Replayer
    structural: StructuralCache

    def __init__(self, opening: PendingOpening, *, bus: EventBus, gate: ReviewGate,
                 info: dict[str, Any], autoplay: bool = True, batch: int = BATCH) -> None:
        super().__init__(bus=bus, gate=gate, info=info, mode="replay",
                         clock=self._session_now)
        self.opening = opening
        self.loaded = False
        self.open_error: BaseException | None = None  # what the opening raised: run_replay's
        self.autoplay = autoplay
        self.batch = batch
        self._markers: list[tuple[int, float, str]] | None = None  # None: still loading
        self._frame: FirstFrame | None = None  # what the first frame shows (before `loaded`)
        self._busy = False
        self._held = False  # frames held from the mount, until the opening lands or a deadline
        self._gc_was_enabled = True
        self.live = self._new_screen()
        self.model = self.live.model

    def _new_screen(self) -> ReplayScreen:
        return ReplayScreen(SessionModel(self.info), self.gate, control=self,
                            markers=self._markers,
                            duration=self._frame.duration if self._frame else 0.0,
                            position=self._shown_offset, clock=self._session_now)

    def _shown_offset(self) -> float:
        if not self.loaded:
            return self._frame.offset if self._frame is not None else 0.0
        return self.replayer.offset_of(self.replayer.position)

    def _session_now(self) -> float:
        """The session's own clock at the shown point: elapsed times read as they did live."""
        if not self.loaded:
            return self._frame.ts if self._frame is not None else 0.0
        idx = self.replayer.index
        pos = idx.pos_le(self.replayer.position)
        return float(idx.ts[max(0, pos)]) if len(idx) else 0.0

    loading_frame_s = LOADING_FRAME_S  # per app: a test lengthens it
    WARM_UP_ON_MOUNT = False  # started after the first frame (_start), not competing with it

    async def on_mount(self) -> None:
        # Runs before PortsideApp.on_mount (Textual calls each class's handler, subclass
        # first). No frame until the opening is folded (_start ends the batch): the first
        # frame is the session at its point.
        self._held = True
        self._begin_batch()
        # Waited for, blocking, not awaited: with the loop free, the screen's own start (its
        # layout, its styles) runs meanwhile, pure Python that the opening's thread needs the
        # GIL for as much (two GIL-bound threads: the session's frame came ~40 ms later than
        # with no thread, and the loading frame drawn at once ~0.3 s later). Blocked here, the
        # thread has the GIL alone, as if the open ran on this thread. Still out by
        # LOADING_FRAME_S: the layout is drawn, "loading…", so the screen is never blank long.
        future = self.opening.frame
        wait([future], timeout=self.loading_frame_s)
        if not future.done():
            self._release_held()
        # The replayer's index and the imports are long-lived: frozen, the collections that
        # building the first frame triggers skip them (PortsideApp unfreezes on unmount).
        gc.freeze()
        # No collection until the warm-up (2 s on): building the first frame allocates a few
        # 100k objects, and the collections they trigger cost ~0.1 s; what is garbage then is
        # collected by the warm-up's full pass.
        self._gc_was_enabled = gc.isenabled()
        gc.disable()
        asyncio.wrap_future(future).add_done_callback(lambda _: self.call_later(self._start))

    def _release_held(self) -> None:
        self._held = False
        self._end_batch()

    def start_warm_up(self) -> None:
        if self._gc_was_enabled:
            gc.enable()
        super().start_warm_up()

    def on_unmount(self) -> None:
        self.opening.drawn.set()  # the opening's thread waits for no frame any more
        if self._gc_was_enabled:
            gc.enable()

    async def _start(self) -> None:
        try:
            frame = self.opening.frame.result()
        except Exception as exc:  # a --from the session does not have, a store gone: say it
            self._failed(exc)
            return
        self._frame, self._markers = frame, frame.markers
        self.live.timeline.loaded(frame.markers, frame.duration)
        if frame.position > 0:  # --from: open at the point
            # No frame drawn until the point is on screen (each intermediate frame would lay
            # out and paint the whole screen); _load_settled ends the batch.
            if self._held:
                self._held = False  # the batch is _load_settled's to end now
            else:
                self._begin_batch()
            await self._load_settled(self.live, frame.position, None, frame.history)
        elif self._held:
            self._release_held()
        if self.opening.future.done():  # built with the frame (none was cached): take it now
            self._opened()
        self.live._update_header()
        # Once the frame is drawn: the replayer (its build holds the GIL) and the warm-up.
        self.call_after_refresh(self._drawn)

    def _drawn(self) -> None:
        self.opening.drawn.set()
        if not self.loaded:
            asyncio.wrap_future(self.opening.future).add_done_callback(
                lambda _: self.call_later(self._opened))
        self.set_timer(WARM_UP_AFTER_S, self.start_warm_up)

    def _failed(self, exc: BaseException) -> None:
        self.open_error = exc
        if self._held:
            self._release_held()
        self.exit(return_code=2)  # run_replay raises it: the CLI says it, once

    def _opened(self) -> None:
        """The replayer is in: the keys, the clock and the playing are its from now."""
        if self.loaded:
            return
        try:
            opening = self.opening.result()
        except Exception as exc:
            self._failed(exc)
            return
        self.replayer, self.structural = opening.replayer, opening.structural
        self.loaded = True
        if self._frame is not None and self.replayer.position != self._frame.position:
            self.call_later(self.seek, self.replayer.position)  # the log moved: show its point
        self.set_interval(PUMP_S, self._pump, name="replay-pump")
        if self.autoplay:
            self.replayer.play()
        self.live._update_header()

    def _is_open(self) -> bool:
        """Whether the replay is open; if not, a notice says it is still loading."""
        if not self.loaded:
            self.notify("still loading the session", title="replay", timeout=2)
        return self.loaded

    def _pump(self) -> None:
        if self._busy or not self.replayer.playing:
            return
        for e in self.replayer.due(self.batch):
            self.bus.deliver_only(e)

    async def _load_settled(self, screen: ReplayScreen, seq: int,
                            state: ReplayState | None, history: History | None = None) -> None:
        """Load, wait until what it mounted is up, then end the batch begun by the caller (no
        frame drawn meanwhile: each intermediate frame would lay out and paint the whole
        screen again)."""
        try:
            self._load(screen, seq, state, history)
            await settled(screen)
        finally:
            self._end_batch()
        # What waited for a refresh ran inside the batch, before any layout: the Agent column
        # follows its end again now. Diffs drawn plain get their colour after that frame.
        transcript = screen.query_one(AgentColumn)
        transcript.scroll_end(animate=False)
        if transcript.uncoloured:
            self.call_after_refresh(transcript.colour_held)

    def _load(self, screen: ReplayScreen, seq: int, state: ReplayState | None,
              history: History | None = None) -> None:
        with screen.query_one(AgentColumn).holding():  # mounts the column's newest entries
            self._fold(screen, seq, state, history)

    def _fold(self, screen: ReplayScreen, seq: int, state: ReplayState | None,
              history: History | None = None) -> None:
        events, cutoff, elided = history if history is not None else compact_history(
            self.replayer, seq, self.structural, state)
        screen.apply(events, model_only=lambda e: 0 < e.seq < cutoff
                     and isinstance(e, _TRANSCRIPT_ONLY))
        for run_id in elided:
            if run_id in screen.model.runs:
                screen.model.runs[run_id].lines_elided = True
        screen.flush()

    async def seek(self, seq: int) -> None:
        """Show the session right after ``seq`` (0: before the first event); keeps playing
        if it was."""
        if not self._is_open():
            return
        r = self.replayer
        seq = max(0, min(int(seq), r.index.last_seq))
        current = r.position
        if current < seq <= current + FORWARD_LIMIT:
            between = list(r.source.read(current + 1, seq))
            r.seek(seq)
            for e in between:
                self.bus.deliver_only(e)
            return
        self._busy = True
        try:
            state = r.seek(seq)
            self.discard_inbox()
            screen = self._new_screen()
            self.live, self.model = screen, screen.model
            # Pop, then push: the old screen must be gone before the new one takes its id.
            self._begin_batch()
            try:
                await self.pop_screen()
                await self.push_screen(screen)
            except BaseException:
                self._end_batch()
                raise
            await self._load_settled(screen, seq, state)
        finally:
            self._busy = False

    # --- what the replay keys ask (ReplayControl) ---------------------------------------------

    def replay_header(self) -> str:
        if not self.loaded:
            f = self._frame  # drawn from the cache: the replayer is still being built
            return "replay ⋯ loading" if f is None else f"replay ⏸ · seq {f.position}/{f.last_seq}"
        r = self.replayer
        mark = "▶" if r.playing else ("end" if r.at_end else "⏸")
        return f"replay {mark} {speed_label(r.speed)} · seq {r.position}/{r.index.last_seq}"

    def replay_toggle(self) -> None:
        if not self._is_open():
            return
        if self.replayer.at_end and not self.replayer.playing:
            self.notify("at the end: 0 goes back to the start", title="replay", timeout=3)
        self.replayer.toggle()
        self.live._update_header()

    def replay_speed(self, factor: float) -> None:
        if not self._is_open():
            return
        speed = self.replayer.speed
        if speed == float("inf"):
            speed = MAX_SPEED * 2
        self.replayer.set_speed(min(MAX_SPEED, max(MIN_SPEED, speed * factor)))
        self.live._update_header()

    def replay_step(self) -> None:
        if not self._is_open():
            return
        e = self.replayer.step()
        if e is None:
            self.notify("at the end of the session", title="replay", timeout=3)
            return
        self.bus.deliver_only(e)
        self.live._update_header()

    async def replay_marker(self, kinds: list[str] | None, forward: bool) -> None:
        if not self._is_open():
            return
        r = self.replayer
        target = r.next_marker(kinds) if forward else r.prev_marker(kinds)
        if target is None:
            what = {"alarm.raised": "alarm", "intervention": "intervention"}.get(
                (kinds or [""])[0], "marker")
            self.notify(f"no {'later' if forward else 'earlier'} {what}", title="replay",
                        timeout=3)
            return
        await self.seek(target)
        self.live._update_header()

    async def replay_edge(self, end: bool) -> None:
        if not self._is_open():
            return
        await self.seek(self.replayer.index.last_seq if end else 0)
        self.live._update_header()

    async def replay_goto(self, spec: str) -> None:
        if not self._is_open():
            return
        seq = self.resolve_goto(spec)
        if seq is None:
            self.notify(f"{spec!r}: give a seq (123) or seconds since the start (t 45.5)",
                        title="go to", severity="warning")
            return
        await self.seek(seq)
        self.live._update_header()

    def resolve_goto(self, spec: str) -> int | None:
        """``123`` / ``seq 123`` → that seq; ``t 45.5`` / ``45.5s`` → the last event at or
        before 45.5 s after the first (original clock)."""
        text = spec.strip().lower()
        m = re.fullmatch(r"(?:seq\s*:?\s*)?(\d+)", text)
        if m:
            return int(m.group(1))
        m = re.fullmatch(r"(?:t(?:ime)?\s*:?\s*(\d+(?:\.\d*)?)|(\d+(?:\.\d*)?)\s*s)", text)
        if not m:
            return None
        idx = self.replayer.index
        if not len(idx):
            return 0
        t = float(idx.ts[0]) + float(m.group(1) or m.group(2))
        pos = int(np.searchsorted(idx.ts, t, side="right")) - 1
        return int(idx.seqs[pos]) if pos >= 0 else 0


async def settled(screen: Screen[Any], rounds: int = 4) -> None:
    """Return once every widget of ``screen`` has handled what was queued for it, and the
    widgets that mounted meanwhile too (at most ``rounds`` passes)."""
    seen = -1
    for _ in range(rounds):
        nodes = list(screen.walk_children(with_self=True))
        if len(nodes) == seen:
            return
        seen = len(nodes)
        done = [asyncio.Event() for _ in nodes]
        waits = [d.wait() for node, d in zip(nodes, done, strict=True)
                 if node.call_later(_set_event, d)]
        await asyncio.gather(*waits)


def _set_event(done: asyncio.Event) -> None:
    done.set()


# Textual reads the signature of every callback it invokes (inspect.signature: ~0.1 ms, paid
# per node and round above); given, it is read at once.
_set_event.__signature__ = inspect.signature(_set_event)  # type: ignore[attr-defined]


def make_replay_app(opening: PendingOpening | Replayer, *, session_id: str,
                    sink: Sink | None = None, info: dict[str, Any] | None = None,
                    reviewer: str | None = None, autoplay: bool = True,
                    batch: int = BATCH) -> ReplayApp:
    """The replay screen over ``opening`` (a replayer still being built in its thread, or one
    built already). ``sink`` (the store's recorder) receives review notes only; None: notes
    are shown but not stored (a JSONL recording)."""
    if isinstance(opening, Replayer):
        opening = PendingOpening.of(opening)
    gate = ReviewGate(EventBus(sink), session_id, reviewer)
    gate.during_replay = True
    return ReplayApp(opening, bus=EventBus(None), gate=gate,
                     info=info if info is not None else session_info(opening.source, session_id),
                     autoplay=autoplay, batch=batch)


def run_replay(store_or_events: Any, session_id: str, opening: PendingOpening | Replayer,
               close: bool = True) -> None:
    """`portside replay` on screen. ``store_or_events``: the Store (review notes are recorded
    in it) or a recording's events (notes are not stored: there is no database). ``close``
    False: the store stays open (the sessions screen comes back after it). Raises what the
    opening raised (a --from the session does not have: ReplayError)."""
    store = None if isinstance(store_or_events, list) else store_or_events
    app = make_replay_app(opening, session_id=session_id,
                          sink=store.recorder if store is not None else None)
    try:
        app.run()
    finally:
        if store is not None:
            if close:
                store.close()  # flushes the recorder: a review note is on disk before we exit
            else:
                store.recorder.flush()
    if app.open_error is not None:
        raise app.open_error
