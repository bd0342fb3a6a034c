"""What running a study costs beyond its runs, and what parallel phases buy, side by side.

    .venv/bin/python -m tests.bench.bench_study [--tasks 4] [--parallel 2] [--no-ray] [--edits 5]

One study of ``--tasks`` verification tasks of the example study's tiny trainer (one reference,
one candidate each), run three ways into fresh databases: sequentially (``--launcher local
--parallel 1``), with ``--parallel`` local workers, and on a local Ray cluster (a head on
127.0.0.1 plus a node declaring ``TPU``; skipped without Ray). Per way: the study's wall time,
the sum of its runs' own wall times (from the log), the study's overhead per task (wall minus
runs, sequential only: there nothing overlaps), and per phase the time from submit to its first
event appended on this machine (median, max).

Then a reviewer's decision, per engine: a study of one `policy = "ask"` task whose scripted
agent proposes ``--edits`` edits one after another; each is approved with `a` on the review
screen (`portside study review`'s, in Pilot) and timed from the key to the intervention row in
the study's database (relay -> engine -> the worker's gate -> back through the one writer).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from portside.cli.study_review import Follower, review_relay, work_root
from portside.core.log import events as ev
from portside.core.study.driver import StudyRun, make_launcher
from portside.core.study.manifest import parse_manifest
from portside.store import Store
from portside.store.study_log import StoreStudyLog, study_sessions

REPO = Path(__file__).resolve().parents[2]


def manifest(n: int, tpu: bool) -> Any:
    tiny = REPO / "sessions" / "study" / "tiny"
    text = "\n".join([
        "[study]", 'name = "bench"', "[defaults]", f'path = "{tiny}"',
        'reference = "python train.py --steps 20"', 'candidate = "python train.py --steps 20"',
        'target = "cpu"', "reference_runs = 1",
        *(["candidate_resources = { TPU = 1 }"] if tpu else []),
        *[f'[[project]]\nname = "p{i}"' for i in range(n)]]) + "\n"
    return parse_manifest(text, "<bench>")


def run_study(m: Any, engine: Any, tmp: Path, label: str) -> dict[str, Any]:
    db = tmp / f"{label}.db"
    store = Store(db)
    study = StudyRun(m, StoreStudyLog(store), engine, tmp / f"{label}-work")
    t0 = time.perf_counter()
    results = study.run()
    wall = time.perf_counter() - t0
    assert not any(r.error for r in results), [r.error for r in results]
    runs_s = 0.0
    for r in results:
        runs_s += sum(e.wall_s for e in store.events(r.session_id, kinds=["run.finished"])
                      if isinstance(e, ev.RunFinished))
    store.close()
    first = study.first_event_s
    return {"wall": wall, "runs": runs_s, "first_med": statistics.median(first),
            "first_max": max(first), "phases": len(first)}


def review_manifest(edits: int, tmp: Path) -> Any:
    """One asking task: ``edits`` edits, each on the line the one before changed, a claim."""
    tiny = REPO / "sessions" / "study" / "tiny"
    old = 'p.add_argument("--log-every", type=int, default=1)'
    assert old in (tiny / "train.py").read_text()
    steps = [{"edit": {"path": "train.py", "old": old.replace("default=1", f"default={i + 1}"),
                       "new": old.replace("default=1", f"default={i + 2}"),
                       "rationale": f"log every {i + 2}th step"}} for i in range(edits)]
    script = tmp / "agent.jsonl"
    script.write_text("\n".join(json.dumps(x) for x in [*steps, {"claim": "logging only"}]))
    text = "\n".join([
        "[study]", 'name = "bench-review"', "[defaults]", f'path = "{tiny}"',
        'reference = "python train.py --steps 5"', 'target = "cpu"', "reference_runs = 1",
        "[[project]]", 'name = "asked"', f'agent = "scripted:{script}"', 'policy = "ask"'])
    return parse_manifest(text + "\n", "<bench-review>")


def review_round_trips(engine: Any, tmp: Path, edits: int) -> list[float]:
    """Seconds from `a` on the review screen to the intervention row, one per edit."""

    tmp.mkdir(parents=True)
    store = Store(tmp / "study.db")
    study = StudyRun(review_manifest(edits, tmp), StoreStudyLog(store), engine, work_root(store))
    done: list[Any] = []
    head = threading.Thread(target=lambda: done.append(study.run()), daemon=True)
    head.start()
    reviewer = Store(tmp / "study.db")
    got: list[float] = []
    try:
        sid = ""
        while not sid:
            sid = next(iter(study_sessions(reviewer, "bench-review").values()), "")
            assert head.is_alive(), "the study ended before its session started"
            time.sleep(0.2)
        for _ in range(edits):
            f = _waiting(reviewer, sid, head, lambda f: bool(f.gate.pending_edits()))
            got.append(asyncio.run(_approve(f.app(), tmp / "study.db", len(got))))
        f = _waiting(reviewer, sid, head, lambda f: f.gate.pending_claim() is not None)
        f.gate.verdict("pass", "bench")
        head.join(timeout=300)
        assert done and not any(r.error for r in done[0]), done
    finally:
        reviewer.close()
        if head.is_alive():
            study.stop()
            head.join(timeout=60)
        store.close()
    return got


def _waiting(store: Any, sid: str, head: threading.Thread, ready: Any) -> Any:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        relay = review_relay(store, sid)
        if relay is not None:
            f = Follower(store, sid, relay)
            if ready(f):
                return f
        assert head.is_alive(), "the study ended while a card should wait"
        time.sleep(0.05)
    raise AssertionError("no card waiting within 300 s")


async def _approve(app: Any, db: Path, before: int) -> float:
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        t0 = time.perf_counter()
        await pilot.press("a")  # the gate returns once the row is committed
        conn = sqlite3.connect(db)
        try:
            while conn.execute("SELECT count(*) FROM events WHERE kind = 'intervention'"
                               ).fetchone()[0] <= before:
                assert time.perf_counter() - t0 < 60, "no intervention row within 60 s"
                time.sleep(0.005)
        finally:
            conn.close()
        took = time.perf_counter() - t0
        await pilot.press("q")
    return took


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument("--edits", type=int, default=5, help="decisions timed per engine")
    args = ap.parse_args()
    from tests.integration.ray_cluster import LocalRayCluster, ray_env

    os.environ.update(ray_env())  # `python` is this venv's, one thread per run
    n = args.tasks
    out: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-study-") as tmp:
        t = Path(tmp)
        review = {"local": review_round_trips(make_launcher("local", parallel=1), t / "rv-local",
                                              args.edits)}
        out["sequential"] = run_study(manifest(n, False), make_launcher("local", parallel=1), t,
                                      "seq")
        out[f"local x{args.parallel}"] = run_study(
            manifest(n, False), make_launcher("local", parallel=args.parallel), t, "par")
        try:
            os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # ray_cluster.py: loopback
            import ray  # noqa: F401
        except ImportError:
            args.no_ray = True
            print("ray: skipped (pip install 'portside[ray]')")
        if not args.no_ray:
            cluster = LocalRayCluster(dict(os.environ))
            try:
                cluster.add_node("tpu", {"TPU": 1})
                ray_launcher = make_launcher("ray", address=cluster.address)
                out["ray"] = run_study(manifest(n, True), ray_launcher, t, "ray")
                review["ray"] = review_round_trips(ray_launcher, t / "rv-ray", args.edits)
            finally:
                cluster.close()
    seq = out["sequential"]
    print(f"{'way':<14}{'wall s':>9}{'runs s':>9}{'vs seq':>8}{'submit->1st event med/max s':>30}")
    for way, r in out.items():
        print(f"{way:<14}{r['wall']:>9.1f}{r['runs']:>9.1f}{r['wall'] / seq['wall']:>8.2f}"
              f"{r['first_med']:>20.2f} / {r['first_max']:.2f}")
    per_task = (seq["wall"] - seq["runs"]) / n
    print(f"TARGET study overhead per task (sequential wall - runs' wall) / tasks: "
          f"{per_task:.2f} s <= 5 s: {'ok' if per_task <= 5 else 'MISSED'}")
    med = seq["first_med"]
    print(f"TARGET submit -> first event on the head, local: median {med:.2f} s <= 2 s: "
          f"{'ok' if med <= 2 else 'MISSED'}")
    if "ray" in out:
        rmed = out["ray"]["first_med"]
        print(f"TARGET submit -> first event on the head, ray: median {rmed:.2f} s <= 5 s: "
              f"{'ok' if rmed <= 5 else 'MISSED'}")
    med_review = {way: statistics.median(s) for way, s in review.items()}
    for way, s in review.items():
        print(f"decision round trip, {way}: " + " ".join(f"{x:.3f}" for x in s) + " s")
    if "ray" in med_review:
        print(f"TARGET decision round trip through Ray (review key a -> intervention row in "
              f"the study's db): median {med_review['ray']:.3f} s, local "
              f"{med_review['local']:.3f} s, ray/local {med_review['ray'] / med_review['local']:.2f}"
              f" (no target: measured; load {os.getloadavg()[0]:.1f})")
    else:
        print(f"TARGET decision round trip, local (review key a -> intervention row): median "
              f"{med_review['local']:.3f} s (no target: measured; ray skipped)")
    par = out[f"local x{args.parallel}"]["wall"] / seq["wall"]
    want = 1.0 / min(args.parallel, os.cpu_count() or 1) + 0.25
    print(f"TARGET study wall, local x{args.parallel} vs sequential: {par:.2f} <= {want:.2f}: "
          f"{'ok' if par <= want else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
