"""The compact history of one point of a replayed session: what a screen folds after a seek.

A far jump builds, from ``replayer.state_at(seq)`` and the index, every structural event (runs,
alarms, edits, interventions, usage: a few per thousand events, cached after the first read),
the last agent messages, and per run the tail of its log and a sample of its step records; a
fresh screen folds that. Log arithmetic only: no Textual here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from portside.core.log import events as ev
from portside.core.replay.index import EventSource
from portside.core.replay.player import Replayer
from portside.core.replay.state import ReplayState

TRANSCRIPT_TAIL = 60  # agent messages rebuilt after a far seek
LOG_TAIL = 400  # log lines per run rebuilt after a far seek
CHART_SAMPLE = 400  # step-record events per run sampled for the chart after a far seek
EXACT_LIMIT = 5_000  # a run with at most this many output/record events is rebuilt whole
FACTS_SCAN = 8  # a run's first record events, where the probe's facts are
# What compact_history returns: (events in order, transcript cutoff seq, runs whose log is
# only a tail).
History = tuple[list[ev.Event], int, set[str]]

# --- the compact history of one point --------------------------------------------------------


class StructuralCache:
    """The bodies of the structural events, read once, in order, as far as a seek needed."""

    def __init__(self, replayer: Replayer) -> None:
        self.replayer = replayer
        self.events: list[ev.Event] = list(replayer.structural_events)  # read by the replayer

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
    # Sorted, then deduplicated by hand: np.unique imports numpy.ma (~30 ms of a cold open).
    picks = np.concatenate([np.arange(FACTS_SCAN), picks])
    picks.sort()
    return positions[picks[np.concatenate([[True], picks[1:] != picks[:-1]])]]


def compact_history(replayer: Replayer, seq: int, cache: StructuralCache,
                    state: ReplayState | None = None) -> History:
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


def session_info(source: EventSource, session_id: str) -> dict[str, Any]:
    """What the screen needs before the first event (the agent decides the Agent column's
    banner): the session.started event's own fields, as the engine's ``info`` has them. Read
    from the source, not the index: a screen composes while the replay is still opening, and
    every log starts at seq 1 (the store's and a recording's are gap-free from there)."""
    info: dict[str, Any] = {"session_id": session_id}
    for e in source.read(1, 1):
        if isinstance(e, ev.SessionStarted):
            info.update(project=e.project, target=e.target, agent=e.agent, title=e.title,
                        mode=e.mode, criteria=e.criteria, banner=e.meta.get("banner", ""))
    return info
