"""`attach` says at once when to start `claude` (issue 41 item 9): its hooks are installed only
after the reference runs (hours on a real project), and the README said to start `claude`
right away, so a session started then worked unreviewed. The first thing attach prints is not
to start it yet; "run `claude`" comes when the hooks are in."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

from cli_run import cli_popen

SLOW_REFERENCE = f"{sys.executable} -c \"import time; time.sleep(3)\""


def test_attach_says_to_wait_before_the_references_and_when_to_start(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "train.py").write_text("print('hello')\n")
    proc = cli_popen("attach", str(tree), "--reference", SLOW_REFERENCE, "--reference-runs", "1",
                     "--headless", "--policy", "runs-only", "--no-sandbox",
                     db=tmp_path / "a.db")
    said: list[str] = []
    settings = tree / ".claude" / "settings.local.json"
    hooked_while_waiting = False
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            said.append(line)
            if "do not start `claude` yet" in line:
                hooked_while_waiting = settings.exists()
            if line.startswith("portside attach: hooks in "):
                break
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    wait = next(i for i, x in enumerate(said) if "do not start `claude` yet" in x)
    ready = next(i for i, x in enumerate(said) if x.startswith("portside attach: hooks in "))
    assert wait < ready, said
    assert "1 reference run" in said[wait] and not hooked_while_waiting
