"""Replay seek benchmark: a generated 1M-event session, opened at --from alarm:last, then
seeked back to the start. Targets: first state < 1 s, seek to start < 100 ms.

    .venv/bin/python tests/bench/bench_replay.py [--events 1000000] [--db PATH]

Generation (bulk, through the store's Batch writer) is timed apart and is not part of the
figures. "open" = build the index from SQLite + fold the structural events into snapshots +
state_at(alarm:last); it is what `portside replay SESSION --from alarm:last` pays before the
first frame.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from portside.core import events as ev
from portside.core.replay import Replayer, fold
from portside.store import Store
from portside.store.projections import Batch
from portside.store.replay_source import StoreSource

SID = "bench-replay-1m"


def synthetic_events(n: int, session_id: str = SID, seed: int = 7) -> Iterator[ev.Event]:
    """A long session: agent turns, edits, runs with heavy output, alarms, interventions."""
    rng = random.Random(seed)
    t = 1_800_000_000.0
    seq = 0

    def mk(cls: type[ev.Event], **kw: object) -> ev.Event:
        nonlocal seq, t
        seq += 1
        t += rng.random() * 0.02 if rng.random() > 0.001 else 5 + rng.random() * 30
        return cls(session_id=session_id, seq=seq, ts=t, **kw)  # type: ignore[call-arg]

    yield mk(ev.SessionStarted, project="/p/mnist", target="tpu:v5e", agent="scripted:x")
    run_no = 0
    while seq < n - 1:
        for _ in range(3):
            yield mk(ev.AgentText, text=f"thinking about step {seq}")
            yield mk(ev.AgentToolCall, call_id=f"c{seq}", name="read_file", input={"path": "train.py"})
            yield mk(ev.AgentToolResult, call_id=f"c{seq - 1}", content="import torch\n" * 3)
        yield mk(ev.AgentUsage, model="claude-sonnet-4-5", input_tokens=900, output_tokens=80,
                 cost_usd=0.004)
        edit = f"e{seq}"
        yield mk(ev.EditProposed, edit_id=edit, path="train.py", before="a\n", after="b\n")
        t0 = t
        yield mk(ev.EditDecided, edit_id=edit, decision="approved")
        yield mk(ev.Intervention, intervention_id=f"i{seq}", action="approve", steering=False,
                 attention_started_at=t0, decided_at=t, answers=seq - 1)
        yield mk(ev.EditApplied, edit_id=edit, path="train.py")
        run_no += 1
        rid = f"run{run_no}"
        yield mk(ev.RunStarted, run_id=rid, role="candidate", attempt=run_no,
                 command="python train.py", target="tpu:v5e")
        for step in range(rng.randint(2000, 20000)):
            if seq >= n - 4:
                break
            if step % 5 == 4:
                yield mk(ev.RunRecord, run_id=rid,
                         records=[{"type": "step", "step": step, "loss": 1.0 / (step + 1)}])
            else:
                yield mk(ev.RunOutput, run_id=rid,
                         lines=[f"Train Epoch: 1 [{step * 64}/60000] Loss: {1 / (step + 1):.4f}"])
        if seq >= n - 3:
            break
        yield mk(ev.RunFinished, run_id=rid, exit_code=0, outcome="failed-silent", wall_s=60.0)
        yield mk(ev.AlarmRaised, alarm_id=f"a{run_no}", check="numeric-drift", severity="error",
                 title=f"loss drifts in run {run_no}", run_id=rid)
    while seq < n - 1:
        yield mk(ev.AgentText, text="wrapping up")
    yield mk(ev.SessionEnded, verdict="fail", outcome="failed-silent", reason="numeric-drift")


def generate(db: Path, n: int) -> Store:
    store = Store(db)
    conn = store.conn
    batch = Batch()
    conn.execute("BEGIN IMMEDIATE")
    for e in synthetic_events(n):
        batch.add(e, ev.encode(e))
        if len(batch.events) >= 50_000:
            batch.write(conn)
            batch = Batch()
    batch.write(conn)
    conn.execute("COMMIT")
    return store


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--db", type=Path, default=None)
    ap.add_argument("--check", action="store_true", help="also compare with a full fold (slow)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db or Path(tmp) / "bench.db"
        t = time.perf_counter()
        store = generate(db, args.events)
        print(f"generated {store.event_count(SID):,} events in {time.perf_counter() - t:.1f} s")

        for label in ("cold (first open: builds the cached index)", "warm (index cached)"):
            t = time.perf_counter()
            source = StoreSource(store, SID)
            rp = Replayer(source)
            t_index = time.perf_counter() - t
            seq = rp.resolve_from("alarm:last")
            state = rp.seek(seq)
            t_open = time.perf_counter() - t
            print(f"{label}: open at alarm:last (seq {seq:,}), first state in "
                  f"{t_open * 1000:.0f} ms (index + snapshots {t_index * 1000:.0f} ms, "
                  f"{source.index_rows_fetched:,} index rows fetched; "
                  f"{len(rp.index.structural):,} structural events, {len(rp._snapshots)} snapshots)")
        last_run = list(state.runs.values())[-1]
        print(f"  state: {len(state.runs)} runs, {len(state.open_alarms())} open alarms, "
              f"{state.interventions} interventions, last line {last_run.tail[-1]!r}")

        t = time.perf_counter()
        start = rp.seek_start()
        t_back = time.perf_counter() - t
        t = time.perf_counter()
        first = rp.step()
        t_step = time.perf_counter() - t
        print(f"seek back to the start: {t_back * 1000:.1f} ms (then first event in "
              f"{t_step * 1000:.1f} ms: {first.__struct_config__.tag if first else None})")
        assert start.seq == 0

        t = time.perf_counter()
        mid = rp.seek(args.events // 2)
        print(f"seek to the middle (seq {mid.seq:,}): {(time.perf_counter() - t) * 1000:.1f} ms")
        if args.check:
            t = time.perf_counter()
            ref = fold(store.events(SID, 1, seq))
            print(f"full fold to seq {seq:,} (what seeking avoids): {time.perf_counter() - t:.1f} s;"
                  f" equal: {ref == rp.state_at(seq)}")
        store.close()


if __name__ == "__main__":
    main()
