"""`verify` with the default criteria says that no goal metric was checked, and at what $/h the
reviewer's time is priced (issue 27 item 9): both were silent. Real subprocess runs of a
torch-free script through the real CLI."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from cli_run import cli

SCRIPT = "print('accuracy=90.0')"


def test_verify_summary_names_the_missing_goal_and_the_rate(tmp_path: Path) -> None:
    cmd = f"{shlex.quote(sys.executable)} -c {shlex.quote(SCRIPT)}"
    out = cli("verify", "--reference", cmd, "--candidate", cmd, "--target", "cpu",
              "--reference-runs", "1", "--cwd", str(tmp_path), db=tmp_path / "v.db",
              cwd=tmp_path)
    flat = " ".join(out.stdout.split())
    assert "goal: none checked" in flat, out.stdout + out.stderr
    assert "at $100/h" in flat and "human-hour" in flat, out.stdout
