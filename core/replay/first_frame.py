"""What a replay screen's first frame needs, apart from the replayer: kept so an open is one read.

A replay at a point shows the compact history there (``history.py``), the timeline's markers
and length, and the header's position and clock. Computing them takes the index, the
snapshots and a few thousand body reads (~0.25 s of GIL-bound Python at 1M events); the
:class:`FirstFrame` holding them decodes in a few ms. It is derived, never the truth: the store
keeps it keyed by the session's last event (``store/replay_frames.py``) and drops it when
anything does not match; the replayer itself is built after the first frame is drawn.

No Textual and no SQLite here: the encoding is msgspec JSON. The frame names the log's events
it shows by seq, read back from the log when it is used (a run's 32 MiB of output is stored
once, in the events); only the events the history makes up (an older run's tail, facts and
last step, seq 0) are in it, validated by the same decoder as the log's. A cache that does not
decode, or names events the log lacks, is a miss, never a wrong frame.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import msgspec

from portside.core.log import events as ev

from .history import History
from .player import Replayer

# Bump when what a frame holds, or how compact_history builds it, changes: a frame written by
# another format is a miss (and is rebuilt), never folded.
FORMAT = 2  # 2: the log's events by seq (1 held their bodies: the output stored twice)


@dataclass
class FirstFrame:
    """The screen at the replay's start point: everything its first frame draws."""

    position: int  # the seq shown (0: before the first event)
    last_seq: int
    ts: float  # the event's ts at the position: the header's session clock
    offset: float  # the replay offset at the position: the timeline's cursor
    duration: float
    markers: list[tuple[int, float, str]]
    history: History


def frame_of(r: Replayer, markers: list[tuple[int, float, str]], history: History
             ) -> FirstFrame:
    """The first frame of a replayer at its start point (``history``: the compact history
    there)."""
    idx = r.index
    pos = idx.pos_le(r.position)
    return FirstFrame(position=r.position, last_seq=idx.last_seq,
                      ts=float(idx.ts[max(0, pos)]) if len(idx) else 0.0,
                      offset=r.offset_of(r.position), duration=r.duration,
                      markers=markers, history=history)


class _Wire(msgspec.Struct, forbid_unknown_fields=True):
    format: int
    position: int
    last_seq: int
    ts: float
    offset: float
    duration: float
    markers: list[tuple[int, float, str]]
    seqs: list[int]  # the log's events in the history, in its order
    made: list[tuple[int, ev.AnyEvent]]  # type: ignore[valid-type]  # (index, made-up event)
    cutoff: int
    elided: list[str]


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(_Wire)


def encode_frame(frame: FirstFrame) -> bytes:
    events, cutoff, elided = frame.history
    seqs = [e.seq for e in events if e.seq > 0]
    made = [(i, e) for i, e in enumerate(events) if e.seq <= 0]
    return _encoder.encode(_Wire(FORMAT, frame.position, frame.last_seq, frame.ts, frame.offset,
                                 frame.duration, frame.markers, seqs, made, cutoff,
                                 sorted(elided)))


def decode_frame(data: bytes, read: Callable[[Sequence[int]], list[ev.Event]]) -> FirstFrame:
    """The frame ``data`` encodes, its log events read with ``read`` (seqs → those events of
    the session's log); ValueError when it is not one of this format or names events that
    the log does not hold."""
    try:
        w = _decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
        raise ValueError(f"not a replay frame: {exc}") from None
    if w.format != FORMAT:
        raise ValueError(f"replay frame format {w.format}, this portside writes {FORMAT}")
    if not 0 <= w.position <= w.last_seq:
        raise ValueError(f"replay frame at seq {w.position} past the log's end {w.last_seq}")
    if any(not 0 < s <= w.position for s in w.seqs) or w.seqs != sorted(set(w.seqs)):
        raise ValueError("replay frame names events outside its log")
    logged = read(w.seqs)
    if [e.seq for e in logged] != w.seqs:
        raise ValueError("replay frame names events its log does not hold")
    total = len(w.seqs) + len(w.made)
    events: list[ev.Event | None] = [None] * total
    for i, e in w.made:
        if not 0 <= i < total or events[i] is not None or e.seq > 0:
            raise ValueError("replay frame's made-up events out of place")
        events[i] = e
    it = iter(logged)
    history = [e if e is not None else next(it) for e in events]
    return FirstFrame(w.position, w.last_seq, w.ts, w.offset, w.duration,
                      [tuple(m) for m in w.markers],  # type: ignore[misc]
                      (history, w.cutoff, set(w.elided)))
