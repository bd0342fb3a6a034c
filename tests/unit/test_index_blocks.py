"""The writer's replay index (store/index_blocks.py) equals the index built from the log itself,
whatever the batching, the interleaving of sessions and the ranges written without blocks."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from portside.core.log import events as ev
from portside.core.replay.index import KIND_CODE
from portside.core.replay.player import Replayer
from portside.core.replay.state import fold
from portside.store import Store, index_blocks
from portside.store.replay_source import StoreSource


def _from_log(store: Store, sid: str) -> tuple[list[int], list[float], list[int]]:
    """Ground truth straight from `events`, with no code of the index involved."""
    rows = store.conn.execute(
        "SELECT seq, ts, kind FROM events WHERE session_id = ? ORDER BY seq", (sid,)).fetchall()
    return [r[0] for r in rows], [r[1] for r in rows], [KIND_CODE[r[2]] for r in rows]


def _events(rng: random.Random, sid: str, n: int) -> list[ev.Event]:
    out: list[ev.Event] = []
    for i in range(n):
        k = rng.random()
        if k < 0.6:
            out.append(ev.RunOutput(session_id=sid, run_id="r", lines=[f"line {i}"]))
        elif k < 0.8:
            out.append(ev.RunRecord(session_id=sid, run_id="r",
                                    records=[{"type": "step", "step": i, "loss": 1 / (i + 1)}]))
        else:
            out.append(ev.AgentText(session_id=sid, text=f"t{i}"))
        out[-1].ts = 1_800_000_000 + i * 0.013 + rng.random() * 1e-3
    return out


@pytest.mark.parametrize("seed", range(4))
def test_blocks_equal_the_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    monkeypatch.setattr(index_blocks, "BLOCK", 7)  # many block boundaries, partial blocks
    rng = random.Random(seed)
    store = Store(tmp_path / "b.db")
    sids = ["s-a", "s-b"]
    streams = {sid: _events(rng, sid, 200) for sid in sids}
    # Interleaved appends, flushed at random points: batches of every size, both sessions.
    cursors = dict.fromkeys(sids, 0)
    while live := [s for s in sids if cursors[s] < len(streams[s])]:
        sid = rng.choice(live)
        store.recorder.append(streams[sid][cursors[sid]])
        cursors[sid] += 1
        if rng.random() < 0.1:
            store.recorder.flush()
    store.recorder.flush()
    if seed % 2:
        # Ranges with no blocks, as a session written by portside before v4 has.
        store.conn.execute("DELETE FROM replay_blocks WHERE rowid % 3 = 0")
    for sid in sids:
        source = StoreSource(store, sid, cache=False)
        got = source.index_arrays()
        seqs, ts, codes = _from_log(store, sid)
        assert got.seqs.tolist() == seqs and got.ts.tolist() == ts
        assert got.codes.tolist() == codes
        assert source.index_blocks_read > 0
        assert (source.index_rows_fetched > 0) == bool(seed % 2)
    store.close()


def test_old_kind_order_is_remapped(tmp_path: Path) -> None:
    """Blocks written by a portside with another kind order still read right."""
    store = Store(tmp_path / "k.db")
    for e in _events(random.Random(1), "s", 50):
        store.recorder.append(e)
    store.recorder.flush()
    rev = list(reversed(index_blocks.KINDS))
    code_of = {k: i for i, k in enumerate(rev)}
    ((codes,),) = store.conn.execute("SELECT codes FROM replay_blocks").fetchall()
    old = bytes(code_of[index_blocks.KINDS[c]] for c in codes)
    store.conn.execute("UPDATE replay_blocks SET codes = ?, kinds = ?", (old, json.dumps(rev)))
    got = StoreSource(store, "s", cache=False).index_arrays()
    assert got.codes.tolist() == _from_log(store, "s")[2]
    # A kind this build does not know: that block is read from the log instead.
    store.conn.execute("UPDATE replay_blocks SET kinds = ?", (json.dumps(["x.unknown"] * 30),))
    source = StoreSource(store, "s", cache=False)
    assert source.index_arrays().codes.tolist() == _from_log(store, "s")[2]
    assert source.index_rows_fetched == 50 and source.index_blocks_read == 0
    store.close()


def test_replay_from_blocks_equals_the_fold(tmp_path: Path) -> None:
    store = Store(tmp_path / "r.db")
    events = _events(random.Random(3), "s", 300)
    for e in events:
        store.recorder.append(e)
    store.recorder.flush()
    logged = list(store.events("s"))
    rp = Replayer(StoreSource(store, "s"), snapshot_every=4, tail_lines=5)
    for seq in (0, 1, 150, 299, 300):
        assert rp.state_at(seq) == fold(logged[:seq], tail_lines=5)
    assert np.array_equal(rp.index.seqs, np.arange(1, 301))
    store.close()


def test_damaged_blocks_are_read_from_the_log(tmp_path: Path) -> None:
    store = Store(tmp_path / "d.db")
    for e in _events(random.Random(2), "s", 40):
        store.recorder.append(e)
    store.recorder.flush()
    truth = _from_log(store, "s")
    good = store.conn.execute("SELECT ts, codes, kinds FROM replay_blocks").fetchone()
    for column, damage in (("codes", b"\x01"), ("codes", bytes(39) + b"\xff"),
                           ("kinds", "not json"), ("ts", bytes(8))):
        store.conn.execute("UPDATE replay_blocks SET ts = ?, codes = ?, kinds = ?", tuple(good))
        store.conn.execute(f"UPDATE replay_blocks SET {column} = ?", (damage,))
        source = StoreSource(store, "s", cache=False)
        got = source.index_arrays()
        assert (got.seqs.tolist(), got.ts.tolist(), got.codes.tolist()) == truth, damage
        assert source.index_rows_fetched == 40
    store.close()
