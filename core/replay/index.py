"""Where a replay's events come from, and the index over them: one entry per event in compact
numpy arrays (seq, ts, kind code), the markers the timeline jumps between, and which kinds are
structural (kept in snapshots) or only feed the tails. No event bodies."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from portside.core.log import events as ev
from portside.core.log.ledger import LEDGER_KINDS

KINDS: tuple[str, ...] = tuple(ev.EVENT_TYPES)
KIND_CODE: dict[str, int] = {k: i for i, k in enumerate(KINDS)}

# What the timeline marks and `]`/`[` jump between.
MARKER_KINDS: tuple[str, ...] = (
    "alarm.raised",
    "intervention",
    "run.started",
    "run.finished",
    "agent.claimed",
    "session.ended",
)
# Kinds whose whole effect on the state is kept in snapshots (rare in a session).
STRUCTURAL_KINDS: frozenset[str] = frozenset(
    {
        "session.started",
        "session.ended",
        "session.state",
        "agent.usage",
        "agent.claimed",
        "edit.proposed",
        "edit.decided",
        "edit.applied",
        "edit.reverted",
        "command.proposed",
        "run.started",
        "run.finished",
        "alarm.raised",
        "alarm.updated",
        "alarm.acknowledged",
        "alarm.cleared",
        "alarm.localized",  # rare, and a seek must show the answer under its alarm
        "intervention",
    }
)
assert LEDGER_KINDS <= STRUCTURAL_KINDS  # snapshots must carry everything the ledger folds
# Kinds that only feed the bounded tails; filled by reading backwards on a seek.
TRANSCRIPT_KINDS: frozenset[str] = frozenset(
    {"agent.text", "agent.tool_call", "agent.tool_result", "agent.claimed"}
)


class ReplayError(ValueError):
    """A replay request that cannot be met (bad --from, unknown seq); the message says why."""


# --- where the events come from -------------------------------------------------------------


@dataclass
class IndexArrays:
    """What a source hands the replayer at open: one entry per event, in seq order."""

    seqs: np.ndarray  # int64
    ts: np.ndarray  # float64
    codes: np.ndarray  # uint8, per KIND_CODE


class EventSource(Protocol):
    """What a replay reads. Seqs are ascending; ``read`` and ``read_seqs`` return them in order."""

    def index_arrays(self) -> IndexArrays: ...

    def read(self, start: int, end: int) -> Iterable[ev.Event]:
        """Events with start <= seq <= end."""
        ...

    def read_seqs(self, seqs: Sequence[int]) -> Iterable[ev.Event]:
        """The events with exactly these seqs (ascending)."""
        ...


def index_of(events: Sequence[ev.Event]) -> IndexArrays:
    """Index arrays for events at hand (a recording, a test's list)."""
    n = len(events)
    return IndexArrays(
        np.fromiter((e.seq for e in events), np.int64, n),
        np.fromiter((e.ts for e in events), np.float64, n),
        np.fromiter((KIND_CODE[str(e.__struct_config__.tag)] for e in events), np.uint8, n),
    )


class SequenceSource:
    """Events already in memory: a JSONL recording, a test's list."""

    def __init__(self, events: Sequence[ev.Event]) -> None:
        self.events = list(events)
        self._pos = {e.seq: i for i, e in enumerate(self.events)}

    def index_arrays(self) -> IndexArrays:
        return index_of(self.events)

    def read(self, start: int, end: int) -> list[ev.Event]:
        lo = bisect.bisect_left(self.events, start, key=lambda e: e.seq)
        hi = bisect.bisect_right(self.events, end, key=lambda e: e.seq)
        return self.events[lo:hi]

    def read_seqs(self, seqs: Sequence[int]) -> list[ev.Event]:
        return [self.events[self._pos[int(s)]] for s in seqs]


# --- the index ------------------------------------------------------------------------------


class ReplayIndex:
    """seq → position, ts and kind for every event, plus marker positions. No bodies."""

    def __init__(self, arrays: IndexArrays) -> None:
        self.seqs = np.asarray(arrays.seqs, dtype=np.int64)
        self.ts = np.asarray(arrays.ts, dtype=np.float64)
        self.codes = np.asarray(arrays.codes, dtype=np.uint8)
        if self.seqs.size > 1 and not bool(np.all(np.diff(self.seqs) > 0)):
            raise ReplayError("events are not in ascending seq order")
        # A log with seq == position + 1 (every store session) needs no search.
        self.dense = self.seqs.size == 0 or (
            int(self.seqs[0]) == 1 and int(self.seqs[-1]) == self.seqs.size
        )

        # Every kind's positions from one stable sort by code (a counting sort of uint8, in
        # order within each kind): one pass over the million codes, not one per list.
        order = np.argsort(self.codes, kind="stable")
        bounds = np.searchsorted(self.codes[order], np.arange(len(KINDS) + 1), side="left")

        def of(kind: str) -> np.ndarray:
            code = KIND_CODE[kind]
            return order[bounds[code]:bounds[code + 1]]

        def where(kinds: Iterable[str]) -> np.ndarray:
            parts = [of(k) for k in kinds]
            return np.sort(np.concatenate(parts)) if parts else np.zeros(0, np.int64)

        self.markers = {k: of(k) for k in MARKER_KINDS}
        self.all_markers = where(MARKER_KINDS)
        self.structural = where(STRUCTURAL_KINDS)
        self.transcript = where(TRANSCRIPT_KINDS)
        self.output = of("run.output")
        self.records = of("run.record")

    def __len__(self) -> int:
        return int(self.seqs.size)

    @property
    def first_seq(self) -> int:
        return int(self.seqs[0]) if self.seqs.size else 0

    @property
    def last_seq(self) -> int:
        return int(self.seqs[-1]) if self.seqs.size else 0

    def pos_le(self, seq: int) -> int:
        """Position of the last event with seq <= ``seq`` (-1 when none)."""
        if self.dense:
            return min(seq, len(self)) - 1 if seq > 0 else -1
        return int(np.searchsorted(self.seqs, seq, side="right")) - 1

    def counts_upto(self, pos: int) -> dict[str, int]:
        if pos < 0:
            return {}
        binc = np.bincount(self.codes[: pos + 1], minlength=len(KINDS))
        return {KINDS[i]: int(n) for i, n in enumerate(binc) if n}
