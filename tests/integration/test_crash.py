"""SIGKILL a writer at random moments: no reported intervention lost, no seq gap, file intact."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

CHILD = Path(__file__).with_name("crash_writer.py")


@pytest.mark.slow  # a real session killed and reopened
def test_sigkill_loses_no_intervention(tmp_path: Path) -> None:
    db = tmp_path / "crash.db"
    rng = random.Random(1234)
    reported: set[str] = set()
    kills = 24
    for n in range(kills):
        proc = subprocess.Popen([sys.executable, str(CHILD), str(db), "crash-session", f"k{n}"],
                                stdout=subprocess.PIPE, text=True)
        # Wait for the first commit, then kill at a random moment of the loop.
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("recorded"), first
        reported.add(first.split()[1])
        time.sleep(rng.uniform(0.0, 0.25))
        os.kill(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        assert proc.returncode == -signal.SIGKILL
        # Only complete lines count as reported: SIGKILL can cut the last write short.
        complete = out.split("\n")[:-1]
        reported.update(line.split()[1] for line in complete
                        if line.startswith("recorded ") and len(line.split()) == 2)

    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    stored = {r[0] for r in conn.execute("SELECT intervention_id FROM interventions")}
    missing = reported - stored
    assert not missing, f"{len(missing)} reported interventions lost: {sorted(missing)[:5]}"
    seqs = [r[0] for r in conn.execute(
        "SELECT seq FROM events WHERE session_id='crash-session' ORDER BY seq")]
    assert seqs == list(range(1, len(seqs) + 1))
    # Each intervention row points at its own event, in the same transaction.
    bad = conn.execute(
        "SELECT COUNT(*) FROM interventions i LEFT JOIN events e ON e.session_id=i.session_id "
        "AND e.seq=i.seq WHERE e.kind IS NOT 'intervention'").fetchone()[0]
    assert bad == 0
    assert len(reported) >= kills
