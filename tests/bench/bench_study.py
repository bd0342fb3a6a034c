"""What running a study costs beyond its runs, and what parallel phases buy, side by side.

    .venv/bin/python tests/bench/bench_study.py [--tasks 4] [--parallel 2] [--no-ray]

One study of ``--tasks`` verification tasks of the example study's tiny trainer (one reference,
one candidate each), run three ways into fresh databases: sequentially (``--engine local
--parallel 1``), with ``--parallel`` local workers, and on a local Ray cluster (a head on
127.0.0.1 plus a node declaring ``TPU``; skipped without Ray). Per way: the study's wall time,
the sum of its runs' own wall times (from the log), the study's overhead per task (wall minus
runs, sequential only: there nothing overlaps), and per phase the time from submit to its first
event appended on this machine (median, max).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from portside.core.log import events as ev
from portside.core.study.manifest import parse_manifest
from portside.core.study.run import StudyRun, make_engine
from portside.store import Store
from portside.store.study_log import StoreStudyLog

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))


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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--no-ray", action="store_true")
    args = ap.parse_args()
    from ray_cluster import LocalRayCluster, ray_env

    os.environ.update(ray_env())  # `python` is this venv's, one thread per run
    n = args.tasks
    out: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-study-") as tmp:
        t = Path(tmp)
        out["sequential"] = run_study(manifest(n, False), make_engine("local", parallel=1), t,
                                      "seq")
        out[f"local x{args.parallel}"] = run_study(
            manifest(n, False), make_engine("local", parallel=args.parallel), t, "par")
        try:
            import ray  # noqa: F401
        except ImportError:
            args.no_ray = True
            print("ray: skipped (pip install 'portside[ray]')")
        if not args.no_ray:
            cluster = LocalRayCluster(dict(os.environ))
            try:
                cluster.add_node("tpu", {"TPU": 1})
                out["ray"] = run_study(manifest(n, True),
                                       make_engine("ray", address=cluster.address), t, "ray")
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
    par = out[f"local x{args.parallel}"]["wall"] / seq["wall"]
    want = 1.0 / min(args.parallel, os.cpu_count() or 1) + 0.25
    print(f"TARGET study wall, local x{args.parallel} vs sequential: {par:.2f} <= {want:.2f}: "
          f"{'ok' if par <= want else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
