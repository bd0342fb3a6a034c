"""What the recorder's file-identity check costs (issue 24 item 10): one check (a stat of the
database and of its WAL), and a 200k-event ingest with the check never, at its cadence
(IDENTITY_EVERY_S) and after every commit. Usage: python -m tests.bench.bench_identity_check"""

from __future__ import annotations

import statistics
import tempfile
import time
import timeit
from pathlib import Path

from portside.core.log import events as ev
from portside.store import recorder as rec_mod


def ingest(path: Path, every: float) -> float:
    rec_mod.IDENTITY_EVERY_S = every
    rec = rec_mod.Recorder(path)
    t0 = time.perf_counter()
    for k in range(200_000):
        rec.append(ev.RunOutput(session_id="s", run_id="r", lines=[f"line {k}"]))
    rec.flush()
    rec.close()
    return time.perf_counter() - t0


def main() -> None:
    d = Path(tempfile.mkdtemp())
    rec = rec_mod.Recorder(d / "b.db")
    n = 20000
    per = timeit.timeit(lambda: rec_mod._identity_lost(rec.path, rec._files), number=n) / n
    rec.close()
    print(f"one identity check (db + wal stat): {per * 1e6:.2f} us")
    for i, (label, every) in enumerate((("never", 1e9), ("every 0.5 s", 0.5),
                                        ("every commit", 0.0))):
        ts = [ingest(d / f"i{i}-{k}.db", every) for k in range(3)]
        print(f"200k run.output appends, check {label}: median {statistics.median(ts):.3f} s")


if __name__ == "__main__":
    main()
