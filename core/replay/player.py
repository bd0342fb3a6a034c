"""Replay engine: play a recorded session with its original timing, seek anywhere fast.

No Textual and no SQLite here. A replay reads its events through a small :class:`EventSource`
(a list of events, or the store's ``StoreSource``), so a UI timer, the headless console and the
tests all drive the same :class:`Replayer`.

Seeking never folds the session from its first event. At open the replayer builds

* an index of every event in compact numpy arrays: seq, ts, kind code (≈17 bytes an event);
* the bodies of the *structural* events (runs, alarms, edits, interventions, costs, the
  session's own state): the rare kinds (a few per thousand in a real session), so only their
  bodies are read at open. Snapshots of the structural state, one every ``snapshot_every`` of
  them, are folded from those as seeks ask for them and kept: an open pays for the one it
  lands near, not a copy of the whole state every ``snapshot_every`` events.

``state_at(seq)`` then copies the nearest snapshot, folds the few structural events after it,
takes the kind counts from the index, and fills the bulky tails (last lines and last step of
each run, the agent transcript) by reading backwards from ``seq`` only as far as it must. The
result equals folding every event up to ``seq`` (tests/unit/test_replay.py checks it).

Timing follows asciinema: a gap between events longer than ``idle_limit`` seconds plays as
``idle_limit`` seconds; the rest play at ``speed`` × the original pace (``speed=inf``: instant).
"""

from __future__ import annotations

import math
import re
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from portside.core.log import events as ev
from portside.core.log.render import event_text

from .index import KINDS, MARKER_KINDS, EventSource, ReplayError, ReplayIndex
from .state import DEFAULT_TAIL, ReplayState

DEFAULT_IDLE_LIMIT = 2.0
DEFAULT_SNAPSHOT_EVERY = 64
_SLACK = 1e-6


# --- --from ---------------------------------------------------------------------------------

_FROM_RE = re.compile(r"^(alarm|intervention|seq|time):(last|\d+(?:\.\d+)?)$")


@dataclass(frozen=True)
class FromSpec:
    what: str  # alarm | intervention | seq | time
    n: int | float | None  # 1-based; seconds for time; None means last

    def __str__(self) -> str:
        return f"{self.what}:{'last' if self.n is None else self.n}"


def parse_from(text: str) -> FromSpec:
    """``alarm:N``, ``intervention:N``, ``seq:N`` (N from 1, or ``last``), ``time:SECONDS``."""
    m = _FROM_RE.match(text.strip())
    if not m:
        raise ReplayError(
            f"--from {text!r}: expected alarm:N, intervention:N, seq:N (N counts from 1, or "
            "'last') or time:SECONDS"
        )
    what, raw = m.groups()
    if raw == "last":
        return FromSpec(what, None)
    if what == "time":
        return FromSpec(what, float(raw))
    if "." in raw:
        raise ReplayError(f"--from {text!r}: {what} takes a whole number")
    n = int(raw)
    if n < 1:
        raise ReplayError(f"--from {text!r}: {what} numbers count from 1")
    return FromSpec(what, n)


# --- the replayer ---------------------------------------------------------------------------


class Replayer:
    """Plays a session; seeks through its index and snapshots.

    ``position`` is the seq of the last event shown (0 before the first). The clock is
    injectable, so a UI timer, a headless loop and the tests run the same code: call
    :meth:`due` to take the events whose time has come, :meth:`next_due_in` to know how long
    to wait for the next one.
    """

    def __init__(
        self,
        source: EventSource,
        *,
        speed: float = 1.0,
        idle_limit: float | None = DEFAULT_IDLE_LIMIT,
        snapshot_every: int = DEFAULT_SNAPSHOT_EVERY,
        tail_lines: int = DEFAULT_TAIL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if snapshot_every < 1:
            raise ValueError("snapshot_every must be at least 1")
        self.source = source
        self.clock = clock
        self.tail_lines = tail_lines
        self.snapshot_every = snapshot_every
        self.index = ReplayIndex(source.index_arrays())
        self._speed = check_speed(speed)
        self._offsets = np.zeros(0)
        self.set_idle_limit(idle_limit)
        # k → the structural state after the first k * snapshot_every structural events
        # (read-only: state_at copies it).
        self._snapshots: dict[int, ReplayState] = {}
        # Every structural event, in order (a few per thousand events): read once here, and
        # kept for a screen's compact history.
        self.structural_events: list[ev.Event] = []
        self._build_snapshots()
        self.position = 0
        self.playing = False
        self._anchor_off = 0.0  # replay-time offset at the anchor
        self._anchor_wall = clock()
        self._buffer: deque[ev.Event] = deque()
        # The state the last seek returned (read, never changed): a screen opened at that
        # point folds it instead of computing it again (a tail read per run).
        self.seek_state: ReplayState | None = None

    # --- timing -------------------------------------------------------------------------------

    def set_idle_limit(self, idle_limit: float | None) -> None:
        """Gaps longer than this play as this long (None or <= 0: never compressed)."""
        self.idle_limit = idle_limit if idle_limit and idle_limit > 0 else None
        ts = self.index.ts
        # In place, in one array: a million events open at each replay.
        offsets = np.empty(ts.size)
        if ts.size:
            offsets[0] = 0.0
            gaps = offsets[1:]
            np.subtract(ts[1:], ts[:-1], out=gaps)
            np.clip(gaps, 0.0, self.idle_limit, out=gaps)
            np.cumsum(gaps, out=gaps)
        self._offsets = offsets

    @property
    def speed(self) -> float:
        return self._speed

    def set_speed(self, speed: float) -> None:
        """Change speed, also while playing: the clock is re-anchored at the current point."""
        speed = check_speed(speed)
        self._anchor_off = self._offset_now()
        self._anchor_wall = self.clock()
        self._speed = speed

    @property
    def duration(self) -> float:
        """Replay length in seconds at speed 1 (idle gaps compressed)."""
        return float(self._offsets[-1]) if len(self._offsets) else 0.0

    def offset_of(self, seq: int) -> float:
        """Replay-time offset (compressed, speed 1) of the event ``seq``; 0 before the first."""
        pos = self.index.pos_le(seq)
        return float(self._offsets[pos]) if pos >= 0 else 0.0

    def _offset_now(self) -> float:
        if not self.playing:
            return self._anchor_off
        if math.isinf(self._speed):
            return math.inf
        return self._anchor_off + (self.clock() - self._anchor_wall) * self._speed

    def play(self) -> None:
        if not self.playing:
            self._anchor_wall = self.clock()
            self.playing = True

    def pause(self) -> None:
        if self.playing:
            self._anchor_off = min(self._offset_now(), self._next_offset())
            self.playing = False

    def toggle(self) -> bool:
        self.pause() if self.playing else self.play()
        return self.playing

    @property
    def at_end(self) -> bool:
        return self.position >= self.index.last_seq

    def _next_offset(self) -> float:
        pos = self.index.pos_le(self.position) + 1
        return float(self._offsets[pos]) if pos < len(self.index) else self.duration

    def next_due_in(self) -> float | None:
        """Wall seconds until the next event is due (0: now); None at the end or paused."""
        if self.at_end or not self.playing:
            return None
        if math.isinf(self._speed):
            return 0.0
        return max(0.0, (self._next_offset() - self._offset_now()) / self._speed)

    def due(self, limit: int = 1000) -> list[ev.Event]:
        """Take (and show) the events whose replay time has come, at most ``limit``."""
        if not self.playing or self.at_end:
            return []
        now_off = self._offset_now()
        start = self.index.pos_le(self.position) + 1
        # A microsecond of slack: a timer woken at exactly next_due_in() must find the event
        # due despite float rounding.
        stop = int(np.searchsorted(self._offsets, now_off + _SLACK, side="right"))
        stop = min(stop, start + limit, len(self.index))
        out = [self._take() for _ in range(max(0, stop - start))]
        if self.at_end:
            self.playing = False
            self._anchor_off = self.duration
        return out

    def step(self) -> ev.Event | None:
        """Show exactly the next event (pauses the clock there)."""
        if self.at_end:
            return None
        e = self._take()
        self.playing = False
        self._anchor_off = self.offset_of(e.seq)
        return e

    def _take(self) -> ev.Event:
        if not self._buffer:
            pos = self.index.pos_le(self.position) + 1
            hi = min(pos + 512, len(self.index)) - 1
            self._buffer.extend(
                self.source.read(int(self.index.seqs[pos]), int(self.index.seqs[hi]))
            )
        e = self._buffer.popleft()
        self.position = e.seq
        return e

    def play_all(
        self,
        emit: Callable[[ev.Event], None],
        sleep: Callable[[float], None] = time.sleep,
        max_wait: float = 0.25,
    ) -> int:
        """Headless: play to the end, calling ``emit`` per event; returns how many were shown.
        Waits are cut to ``max_wait`` so a speed change from another thread applies promptly."""
        self.play()
        shown = 0
        while True:
            batch = self.due()
            for e in batch:
                emit(e)
            shown += len(batch)
            if batch:
                continue
            wait = self.next_due_in()
            if wait is None:
                return shown
            sleep(min(wait, max_wait))

    # --- seeking ------------------------------------------------------------------------------

    def seek(self, seq: int) -> ReplayState:
        """Show the session as it was right after event ``seq`` (0: before the first)."""
        seq = max(0, min(int(seq), self.index.last_seq))
        state = self.state_at(seq)
        self.seek_state = state
        self.position = state.seq
        self._buffer.clear()
        self._anchor_off = self.offset_of(self.position)
        self._anchor_wall = self.clock()
        return state

    def next_marker(self, kinds: Iterable[str] | None = None, after: int | None = None) -> int | None:
        """Seq of the first marker after ``after`` (default: the position), or None."""
        positions = self._marker_positions(kinds)
        pos = self.index.pos_le(self.position if after is None else after)
        i = int(np.searchsorted(positions, pos, side="right"))
        return int(self.index.seqs[positions[i]]) if i < positions.size else None

    def prev_marker(self, kinds: Iterable[str] | None = None, before: int | None = None) -> int | None:
        """Seq of the last marker before ``before`` (default: the position), or None."""
        positions = self._marker_positions(kinds)
        ref = self.position if before is None else before
        pos = self.index.pos_le(ref)
        # A marker at exactly the position is where we stand: go past it.
        if pos >= 0 and int(self.index.seqs[pos]) == ref:
            pos -= 1
        i = int(np.searchsorted(positions, pos, side="right")) - 1
        return int(self.index.seqs[positions[i]]) if i >= 0 else None

    def markers(self, kinds: Iterable[str] | None = None) -> list[tuple[int, float, str]]:
        """(seq, replay offset, kind) of every marker, for a timeline bar."""
        positions = self._marker_positions(kinds)
        return [
            (int(self.index.seqs[p]), float(self._offsets[p]), KINDS[int(self.index.codes[p])])
            for p in positions
        ]

    def _marker_positions(self, kinds: Iterable[str] | None) -> np.ndarray:
        if kinds is None:
            return self.index.all_markers
        kinds = list(kinds)
        unknown = [k for k in kinds if k not in MARKER_KINDS]
        if unknown:
            raise ReplayError(
                f"not marker kinds: {', '.join(unknown)} (known: {', '.join(MARKER_KINDS)})"
            )
        return np.unique(np.concatenate([self.index.markers[k] for k in kinds]))

    def resolve_from(self, spec: FromSpec | str) -> int:
        """The seq a ``--from`` names (the event itself, so a screen can start on it)."""
        if isinstance(spec, str):
            spec = parse_from(spec)
        if not len(self.index):
            raise ReplayError(f"--from {spec}: the session has no events")
        if spec.what == "seq":
            last = self.index.last_seq
            seq = last if spec.n is None else int(spec.n)
            if not self.index.first_seq <= seq <= last:
                raise ReplayError(
                    f"--from {spec}: the session's events are seq {self.index.first_seq}..{last}"
                )
            return seq
        if spec.what == "time":
            dur = float(self.index.ts[-1] - self.index.ts[0])
            t = dur if spec.n is None else float(spec.n)
            if t > dur:
                raise ReplayError(f"--from {spec}: the session lasts {dur:.1f} s")
            pos = int(np.searchsorted(self.index.ts, self.index.ts[0] + t, side="left"))
            return int(self.index.seqs[min(pos, len(self.index) - 1)])
        kind = "alarm.raised" if spec.what == "alarm" else "intervention"
        positions = self.index.markers[kind]
        if positions.size == 0:
            raise ReplayError(f"--from {spec}: the session has no {spec.what}s")
        n = positions.size if spec.n is None else int(spec.n)
        if n > positions.size:
            raise ReplayError(
                f"--from {spec}: the session has {positions.size} {spec.what}"
                f"{'s' if positions.size != 1 else ''}"
            )
        return int(self.index.seqs[positions[n - 1]])

    # --- state at any seq ---------------------------------------------------------------------

    def _build_snapshots(self) -> None:
        """Read the structural events once; the snapshots are folded from them on demand."""
        self._snapshots = {0: ReplayState(tail_lines=self.tail_lines)}
        seqs = self.index.seqs[self.index.structural]
        self.structural_events = list(self._read_seqs(seqs))

    def _snapshot(self, k: int) -> ReplayState:
        """The structural state after the first ``k * snapshot_every`` structural events:
        folded from the nearest snapshot kept before it, then kept."""
        kept = self._snapshots.get(k)
        if kept is not None:
            return kept
        j = max(i for i in self._snapshots if i < k)
        state = self._snapshots[j].copy()
        every = self.snapshot_every
        for e in self.structural_events[j * every : k * every]:
            state._apply_structural(e)
        self._snapshots[k] = state
        return state

    def _read_seqs(self, seqs: np.ndarray, chunk: int = 4096) -> Iterator[ev.Event]:
        for lo in range(0, seqs.size, chunk):
            yield from self.source.read_seqs([int(s) for s in seqs[lo : lo + chunk]])

    def state_at(self, seq: int) -> ReplayState:
        """The state right after event ``seq``, without folding from the start."""
        pos = self.index.pos_le(seq)
        if pos < 0:
            return ReplayState(tail_lines=self.tail_lines)
        # Structural: nearest snapshot, then the few structural events after it.
        n_struct = int(np.searchsorted(self.index.structural, pos, side="right"))
        k = n_struct // self.snapshot_every
        state = self._snapshot(k).copy()
        for e in self.structural_events[k * self.snapshot_every : n_struct]:
            state._apply_structural(e)
        state.seq, state.ts = int(self.index.seqs[pos]), float(self.index.ts[pos])
        state.counts = self.index.counts_upto(pos)
        self._fill_tails(state, pos)
        return state

    def _fill_tails(self, state: ReplayState, pos: int) -> None:
        idx = self.index
        # Agent transcript: exactly the last N transcript events.
        n = int(np.searchsorted(idx.transcript, pos, side="right"))
        seqs = idx.seqs[idx.transcript[max(0, n - self.tail_lines) : n]]
        state.transcript.extend(event_text(e) for e in self._read_seqs(seqs))
        cache: dict[int, ev.Event] = {}  # concurrent runs share blocks: decode each once
        for run in state.runs.values():
            # A run's output and records lie between its start and its finish (a finished
            # run's tail is frozen: see ReplayState._apply_tail), so scan back from there.
            end = pos if run.finished_seq is None else min(pos, idx.pos_le(run.finished_seq))
            chunks: list[list[str]] = []
            got = 0
            for e in self._back(idx.output, end, run.started_seq, cache, self.tail_lines):
                if not isinstance(e, ev.RunOutput) or e.run_id != run.run_id:
                    continue
                chunks.append(e.lines)
                got += len(e.lines)
                if got >= self.tail_lines:
                    break
            for chunk in reversed(chunks):
                run.tail.extend(chunk)
            for e in self._back(idx.records, end, run.started_seq, cache, 4):
                if not isinstance(e, ev.RunRecord) or e.run_id != run.run_id:
                    continue
                step = next((x for x in reversed(e.records) if x.get("type") == "step"), None)
                if step is not None:
                    run.last_step = step
                    break

    def _back(
        self, positions: np.ndarray, pos: int, after_seq: int, cache: dict[int, ev.Event],
        block: int = 32,
    ) -> Iterator[ev.Event]:
        """The events at ``positions`` up to position ``pos``, newest first, while their seq is
        above ``after_seq``. Read in growing blocks from ``block`` (about what the caller
        expects to need: every run of a session pays it at open), so a tail right there costs
        one query."""
        i = int(np.searchsorted(positions, pos, side="right"))
        block = max(1, block)
        while i > 0:
            lo = max(0, i - block)
            seqs = [int(s) for s in self.index.seqs[positions[lo:i]]]
            missing = [s for s in seqs if s not in cache]
            for e in self._read_seqs(np.array(missing, dtype=np.int64)):
                cache[e.seq] = e
            for s in reversed(seqs):
                if s <= after_seq:
                    return
                yield cache[s]
            i = lo
            block = min(block * 4, 8192)


def check_speed(speed: float) -> float:
    if speed == 0:
        return math.inf  # 0 means "as fast as possible", as the CLI documents
    if not speed > 0:
        raise ReplayError(f"speed must be > 0 (0 for instant), got {speed}")
    return float(speed)
