"""`portside replay` on screen: the live screen fed by a :class:`~portside.core.replay.Replayer`.

    app = make_replay_app(replayer, session_id=sid, sink=store.recorder)

Playing: a UI timer takes the events whose time has come (``due(limit)``: bounded batches, the
UI never waits on the replay) and hands them to ``bus.deliver_only``: the same path, the same
fold and the same widgets as a live session, so a replay played to its end shows what the live
screen showed.

Seeking never folds from the first event. A far jump builds a *compact history* of the target
point from ``replayer.state_at(seq)`` and the index: every structural event (runs, alarms,
edits, interventions, usage: a few per thousand events, cached after the first read), the last
agent messages, and per run the tail of its log and a sample of its step records; a fresh screen
folds that. A jump a little ahead (≤ FORWARD_LIMIT events) just plays the events in between.

Review notes (`n`) go through a gate on a bus of their own whose sink is the store's recorder:
stored durably as ``review-note`` interventions with ``during_replay`` set; the replayed events
never touch the store.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from portside.core import events as ev
from portside.core.bus import EventBus, Sink
from portside.core.replay import Replayer, ReplayState
from portside.core.review import ReviewGate

from .app import PortsideApp
from .model import SessionModel
from .screens.replay import ReplayScreen, speed_label

PUMP_S = 1 / 30  # how often the timer looks for due events
BATCH = 2_000  # events folded per timer tick at most: a fast replay stays responsive
FORWARD_LIMIT = 2_000  # a jump at most this far ahead plays the events in between
TRANSCRIPT_TAIL = 60  # agent messages rebuilt after a far seek
LOG_TAIL = 400  # log lines per run rebuilt after a far seek
CHART_SAMPLE = 400  # step-record events per run sampled for the chart after a far seek
EXACT_LIMIT = 5_000  # a run with at most this many output/record events is rebuilt whole
FACTS_SCAN = 8  # a run's first record events, where the probe's facts are
MIN_SPEED, MAX_SPEED = 1 / 64, 4096.0

# Kinds that only show in the Agent column: before the transcript window they feed the model
# alone (the header still counts them), so a seek mounts a bounded number of widgets.
_TRANSCRIPT_ONLY = (ev.AgentClaimed, ev.EditProposed, ev.EditDecided, ev.EditApplied,
                    ev.Intervention, ev.SessionState)


# --- the compact history of one point --------------------------------------------------------


class StructuralCache:
    """The bodies of the structural events, read once, in order, as far as a seek needed."""

    def __init__(self, replayer: Replayer) -> None:
        self.replayer = replayer
        self.events: list[ev.Event] = []

    def upto(self, count: int) -> list[ev.Event]:
        idx = self.replayer.index
        if len(self.events) < count:
            seqs = idx.seqs[idx.structural[len(self.events):count]]
            for lo in range(0, seqs.size, 4096):
                self.events.extend(self.replayer.source.read_seqs(
                    [int(s) for s in seqs[lo:lo + 4096]]))
        return self.events[:count]


def _read(replayer: Replayer, positions: np.ndarray) -> list[ev.Event]:
    seqs = [int(s) for s in replayer.index.seqs[positions]]
    return list(replayer.source.read_seqs(seqs)) if seqs else []


def _between(positions: np.ndarray, lo_pos: int, hi_pos: int) -> np.ndarray:
    """The entries of ``positions`` in (lo_pos, hi_pos]."""
    a = int(np.searchsorted(positions, lo_pos, side="right"))
    b = int(np.searchsorted(positions, hi_pos, side="right"))
    return positions[a:b]


def _log_tail(replayer: Replayer, positions: np.ndarray, run_id: str
              ) -> tuple[list[ev.Event], bool]:
    """The run's last output events holding LOG_TAIL lines (read backwards in growing blocks),
    and whether older output events were left unread."""
    got: list[ev.Event] = []
    lines = 0
    i = positions.size
    block = 64
    while i > 0 and lines < LOG_TAIL:
        lo = max(0, i - block)
        batch = _read(replayer, positions[lo:i])
        for k in range(len(batch) - 1, -1, -1):
            e = batch[k]
            if isinstance(e, ev.RunOutput) and e.run_id == run_id:
                got.append(e)
                lines += len(e.lines)
                if lines >= LOG_TAIL:
                    return got, lo + k > 0
        i, block = lo, min(block * 4, 4096)
    return got, False


def _record_sample(positions: np.ndarray) -> np.ndarray:
    """The first FACTS_SCAN record events, CHART_SAMPLE spread over the rest, and the last."""
    if positions.size <= CHART_SAMPLE + FACTS_SCAN:
        return positions
    picks = np.linspace(FACTS_SCAN, positions.size - 1, CHART_SAMPLE).astype(np.int64)
    return positions[np.unique(np.concatenate([np.arange(FACTS_SCAN), picks]))]


def compact_history(replayer: Replayer, seq: int, cache: StructuralCache,
                    state: ReplayState | None = None
                    ) -> tuple[list[ev.Event], int, set[str]]:
    """Events that fold into the screen at ``seq``: (events in order, transcript cutoff seq,
    runs whose log is only a tail). Events older than the cutoff that only show in the Agent
    column should feed the model alone. Synthesized events (from the state's tails) have seq 0."""
    idx = replayer.index
    pos = idx.pos_le(seq)
    if pos < 0:
        return [], 0, set()
    state = state if state is not None and state.seq == int(idx.seqs[pos]) else \
        replayer.state_at(seq)
    keyed: dict[float, ev.Event] = {}
    n_struct = int(np.searchsorted(idx.structural, pos, side="right"))
    for e in cache.upto(n_struct):
        keyed[float(e.seq)] = e
    n_tr = int(np.searchsorted(idx.transcript, pos, side="right"))
    window = idx.transcript[max(0, n_tr - TRANSCRIPT_TAIL):n_tr]
    cutoff = int(idx.seqs[window[0]]) if n_tr > TRANSCRIPT_TAIL else 0
    for e in _read(replayer, window):
        keyed[float(e.seq)] = e

    sid = next(iter(keyed.values())).session_id if keyed else ""
    # Runs the screen shows in full: every reference (the chart's envelope) and the newest
    # candidates; older candidates get the tail and last step the state already holds.
    candidates = [r.run_id for r in state.runs.values() if r.role == "candidate"]
    full = {r.run_id for r in state.runs.values() if r.role != "candidate"} | set(candidates[-2:])
    elided: set[str] = set()
    for run in state.runs.values():
        start = idx.pos_le(run.started_seq)
        end = pos if run.finished_seq is None else min(pos, idx.pos_le(run.finished_seq))
        outs = _between(idx.output, start, end)
        recs = _between(idx.records, start, end)
        # Synthesized events sit just before the run's finish (or the point, while it runs).
        at = (run.finished_seq if run.finished_seq is not None and run.finished_seq <= seq
              else int(idx.seqs[pos]) + 1) - 0.5
        if run.run_id in full and outs.size + recs.size <= EXACT_LIMIT:
            for e in _read(replayer, np.concatenate([outs, recs])):
                if getattr(e, "run_id", None) == run.run_id:
                    keyed[float(e.seq)] = e
            continue
        head = _read(replayer, recs[:FACTS_SCAN])
        facts = [r for e in head if isinstance(e, ev.RunRecord) and e.run_id == run.run_id
                 for r in e.records if r.get("type") == "facts"]
        if run.run_id in full:
            tail, cut = _log_tail(replayer, outs, run.run_id)
            for e in tail:
                keyed[float(e.seq)] = e
            for e in _read(replayer, _record_sample(recs)):
                if isinstance(e, ev.RunRecord) and e.run_id == run.run_id:
                    keyed[float(e.seq)] = e
            if cut:
                elided.add(run.run_id)
            continue
        if facts:
            keyed[run.started_seq + 0.5] = ev.RunRecord(session_id=sid,
                                                        run_id=run.run_id, records=facts[-1:])
        if run.tail:
            keyed[at - 0.25] = ev.RunOutput(session_id=sid,
                                            run_id=run.run_id, lines=list(run.tail))
            if run.tail.maxlen is None or len(run.tail) >= run.tail.maxlen:
                elided.add(run.run_id)
        if run.last_step is not None:
            keyed[at] = ev.RunRecord(session_id=sid, run_id=run.run_id,
                                     records=[run.last_step])
    return [keyed[k] for k in sorted(keyed)], cutoff, elided


def session_info(replayer: Replayer, session_id: str) -> dict[str, Any]:
    """What the screen needs before the first event (the agent decides the Agent column's
    banner): the session.started event's own fields, as the engine's ``info`` has them."""
    info: dict[str, Any] = {"session_id": session_id}
    if not len(replayer.index):
        return info
    first = replayer.index.first_seq
    for e in replayer.source.read(first, first):
        if isinstance(e, ev.SessionStarted):
            info.update(project=e.project, target=e.target, agent=e.agent, title=e.title,
                        mode=e.mode, criteria=e.criteria, banner=e.meta.get("banner", ""))
    return info


# --- the app --------------------------------------------------------------------------------


class ReplayApp(PortsideApp):
    """PortsideApp whose events come from a Replayer; its screen is a ReplayScreen."""

    def __init__(self, replayer: Replayer, *, bus: EventBus, gate: ReviewGate,
                 info: dict[str, Any], autoplay: bool = True, batch: int = BATCH) -> None:
        super().__init__(bus=bus, gate=gate, info=info, mode="replay",
                         clock=self._session_now)
        self.replayer = replayer
        self.autoplay = autoplay
        self.batch = batch
        self.structural = StructuralCache(replayer)
        self._markers = replayer.markers()
        self._busy = False
        self.live = self._new_screen()
        self.model = self.live.model

    def _new_screen(self) -> ReplayScreen:
        return ReplayScreen(SessionModel(self.info), self.gate, control=self,
                            markers=self._markers, duration=self.replayer.duration,
                            position=lambda: self.replayer.offset_of(self.replayer.position),
                            clock=self._session_now)

    def _session_now(self) -> float:
        """The session's own clock at the shown point: elapsed times read as they did live."""
        idx = self.replayer.index
        pos = idx.pos_le(self.replayer.position)
        return float(idx.ts[max(0, pos)]) if len(idx) else 0.0

    def on_mount(self) -> None:
        # Runs before PortsideApp.on_mount (Textual calls each class's handler, subclass
        # first): start once the screen is up.
        self.call_later(self._start)

    async def _start(self) -> None:
        if self.replayer.position > 0:  # --from: open at the point
            self._load(self.live, self.replayer.position, None)
        self.set_interval(PUMP_S, self._pump, name="replay-pump")
        if self.autoplay:
            self.replayer.play()
        self.live._update_header()

    def _pump(self) -> None:
        if self._busy or not self.replayer.playing:
            return
        for e in self.replayer.due(self.batch):
            self.bus.deliver_only(e)

    def _load(self, screen: ReplayScreen, seq: int, state: ReplayState | None) -> None:
        events, cutoff, elided = compact_history(self.replayer, seq, self.structural, state)
        chunk: list[ev.Event] = []
        for e in events:
            if 0 < e.seq < cutoff and isinstance(e, _TRANSCRIPT_ONLY):
                if chunk:
                    screen.apply(chunk)
                    chunk = []
                screen.model.apply(e)
                if isinstance(e, ev.EditProposed):
                    screen.edit_order.append(e.edit_id)  # keeps "edit 7/9" numbering
            else:
                chunk.append(e)
        if chunk:
            screen.apply(chunk)
        for run_id in elided:
            if run_id in screen.model.runs:
                screen.model.runs[run_id].lines_elided = True
        screen.flush()

    async def seek(self, seq: int) -> None:
        """Show the session right after ``seq`` (0: before the first event); keeps playing
        if it was."""
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
            await self.pop_screen()
            await self.push_screen(screen)
            self._load(screen, seq, state)
        finally:
            self._busy = False

    # --- what the replay keys ask (ReplayControl) ---------------------------------------------

    def replay_header(self) -> str:
        r = self.replayer
        mark = "▶" if r.playing else ("end" if r.at_end else "⏸")
        return f"replay {mark} {speed_label(r.speed)} · seq {r.position}/{r.index.last_seq}"

    def replay_toggle(self) -> None:
        if self.replayer.at_end and not self.replayer.playing:
            self.notify("at the end: 0 goes back to the start", title="replay", timeout=3)
        self.replayer.toggle()
        self.live._update_header()

    def replay_speed(self, factor: float) -> None:
        speed = self.replayer.speed
        if speed == float("inf"):
            speed = MAX_SPEED * 2
        self.replayer.set_speed(min(MAX_SPEED, max(MIN_SPEED, speed * factor)))
        self.live._update_header()

    def replay_step(self) -> None:
        e = self.replayer.step()
        if e is None:
            self.notify("at the end of the session", title="replay", timeout=3)
            return
        self.bus.deliver_only(e)
        self.live._update_header()

    async def replay_marker(self, kinds: list[str] | None, forward: bool) -> None:
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
        await self.seek(self.replayer.index.last_seq if end else 0)
        self.live._update_header()

    async def replay_goto(self, spec: str) -> None:
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


def make_replay_app(replayer: Replayer, *, session_id: str, sink: Sink | None = None,
                    info: dict[str, Any] | None = None, reviewer: str | None = None,
                    autoplay: bool = True, batch: int = BATCH) -> ReplayApp:
    """The replay screen over ``replayer``. ``sink`` (the store's recorder) receives review
    notes only; None: notes are shown but not stored (a JSONL recording)."""
    gate = ReviewGate(EventBus(sink), session_id, reviewer)
    gate.during_replay = True
    return ReplayApp(replayer, bus=EventBus(None), gate=gate,
                     info=info if info is not None else session_info(replayer, session_id),
                     autoplay=autoplay, batch=batch)


def run_replay(store_or_events: Any, session_id: str, replayer: Replayer) -> None:
    """`portside replay` on screen. ``store_or_events``: the Store (review notes are recorded
    in it) or a recording's events (notes are not stored: there is no database)."""
    store = None if isinstance(store_or_events, list) else store_or_events
    app = make_replay_app(replayer, session_id=session_id,
                          sink=store.recorder if store is not None else None)
    try:
        app.run()
    finally:
        if store is not None:
            store.close()  # flushes the recorder: a review note is on disk before we exit
