"""The full-size benchmark (tests/bench/bench_fullsize.py) at a small size, so it does not rot:
a real trainer subprocess through the runner, bus, store and live checker; the planted drift
must be raised live, with the figures printed. Ground truth: the drift the trainer plants."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "bench_fullsize.py"


def test_fullsize_bench_small_raises_the_planted_drift() -> None:
    out = subprocess.run([sys.executable, str(BENCH), "--steps", "3000", "--ranks", "2",
                          "--lines", "3", "--compare", "1.0", "--pass-steps", "0"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    m = re.search(r"drift planted at step ([\d,]+); left the envelope from step ([\d,]+); "
                  r"window completed at step ([\d,]+); alarm (-?[\d.]+) s after", text)
    assert m, text
    planted, first, done = (int(g.replace(",", "")) for g in m.groups()[:3])
    assert planted == 2850 and planted <= first <= done < 3000
    assert float(m.group(4)) >= 0  # raised after the step that completed the window was written
    assert "other alarms" not in text, text  # only the planted fault
    for figure in ("records/s", "peak RSS", "of one core", "ratio", "load average"):
        assert figure in text, text
