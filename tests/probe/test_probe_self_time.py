"""The probe's self-reported cost covers all its per-step work (issue 30), not only the
optimizer hooks: time spent inside its backward hook shows in `probe_s` and `probe_step_s`."""

from __future__ import annotations

from ._util import ProbeRun, read_records, steps_of


def test_backward_hook_time_is_reported(probe_run: ProbeRun) -> None:
    # 112 steps: 110 counted (below), one whole window of OWN_WINDOW (100) for probe_step_s
    proc, out = probe_run("slow_read.py", "112")
    reads, slow_s = next(line.split()[1:] for line in proc.stdout.splitlines()
                         if line.startswith("READS "))
    assert int(reads) == 112  # one slow read inside the probe's hook per backward
    recs = read_records(out)
    assert len(steps_of(recs)) == 112
    ex = recs[-1]
    assert ex["type"] == "exit"
    # Steps 0 and 1 are left out of the self-report (one-time work): 110 slow reads remain,
    # each at least slow_s long (sleep never returns early).
    known = 110 * float(slow_s)
    assert ex["probe_s"] >= known
    # Per step, from windows of 100 steps: the slow read is the bulk of each step's own time.
    assert float(slow_s) <= ex["probe_step_s"] < ex["probe_s"]
