"""Issue 40.1: `portside attach` reuses stored references as `run` and `verify` do, and
`--fresh-references` runs them again.

Real `portside attach` processes on one database; the user's own `claude -p` (the CLI
claude-agent-sdk bundles) against a scripted loopback model (tests/loopback_api.py), started
once attach says its hooks are in, as a user would. Each reference command stamps a line into
a counter file outside the project before it trains (hence --no-sandbox): the file, not the
log, says how many reference processes started.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from cli_run import cli_popen

claude_agent_sdk = pytest.importorskip(
    "claude_agent_sdk", reason="the claude-code extra is not installed (`make venv` does)")

from loopback_api import LoopbackAPI, text, tool  # noqa: E402

from portside.core.log import events as ev  # noqa: E402
from portside.store import Store  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FAST = REPO / "tests" / "bench" / "fullsize_trainer.py"  # torch-free, sealed probe records
PY = sys.executable
CLI = Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"
MODEL = "claude-haiku-4-5"
TRAIN = f"{PY} -S fast.py 30 1 0 1000000 1"


class _Attach:
    """One `portside attach --headless --json` process: its stderr read as it comes (the
    log would fill the pipe), "hooks in" waited for."""

    def __init__(self, db: Path, project: Path, counter: Path, *extra: str) -> None:
        self.proc = cli_popen(
            "attach", str(project), "--reference", f"echo x >> {counter}; {TRAIN}",
            "--candidate", TRAIN, "--reference-runs", "2", "--headless", "--json",
            "--policy", "auto", "--no-sandbox", "--timeout", "120", *extra, db=db)
        self.err: list[str] = []
        self.hooked = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.err.append(line)
            if line.startswith("portside attach: hooks in "):
                self.hooked.set()

    def wait_hooked(self) -> None:
        deadline = time.monotonic() + 120
        while not self.hooked.wait(0.2):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                pytest.fail("attach never hooked: " + "".join(self.err)[-3000:])

    def result(self) -> dict[str, Any]:
        out = self.proc.communicate(timeout=120)[0]
        self._reader.join(10)
        assert self.proc.returncode in (0, 1), "".join(self.err)[-3000:]
        return json.loads(out)  # type: ignore[no-any-return]


def _claude(api: LoopbackAPI, tmp: Path, project: Path) -> str:
    """The user's `claude -p` in their project, to its end; its output."""
    env = {**os.environ, "ANTHROPIC_API_KEY": "sk-ant-api03-LOOPBACK-REUSE-0123456789abcdef",
           "ANTHROPIC_BASE_URL": api.url, "CLAUDE_CONFIG_DIR": str(tmp / "claude-config"),
           "DISABLE_TELEMETRY": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
           "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1"}
    done = subprocess.run([str(CLI), "-p", "port fast.py to XLA", "--model", MODEL,
                           "--output-format", "stream-json", "--verbose"], cwd=project, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=240,
                          check=False)
    return done.stdout.decode(errors="replace")


def _session(db: Path, project: Path, counter: Path, tmp: Path) -> dict[str, Any]:
    """An attach whose Claude Code session reads the trainer and says it is done (no edit)."""
    attach = _Attach(db, project, counter)
    attach.wait_hooked()
    with LoopbackAPI([[tool("r1", "Read", {"file_path": str(project / "fast.py")})],
                      [text("Nothing to port: fast.py runs as it is.")]] * 2) as api:
        said = _claude(api, tmp, project)
        assert not api.errors, api.errors
    try:
        return attach.result()
    except (AssertionError, ValueError, subprocess.TimeoutExpired):
        attach.proc.kill()
        raise AssertionError(said[-3000:]) from None


def _reused(out: dict[str, Any]) -> list[bool]:
    return [bool(r.get("reused_from")) for r in out["reference"]]


def _count(counter: Path) -> int:
    return len(counter.read_text().splitlines()) if counter.exists() else 0


@pytest.mark.slow  # three attach sessions, two with a whole claude -p each
@pytest.mark.heavy  # a whole real agent CLI session (make test-slow)
def test_attach_reuses_stored_references_and_fresh_runs_them(tmp_path: Path) -> None:
    project, db, counter = tmp_path / "proj", tmp_path / "a.db", tmp_path / "count"
    project.mkdir()
    shutil.copy(FAST, project / "fast.py")

    first = _session(db, project, counter, tmp_path)
    assert _count(counter) == 2 and _reused(first) == [False, False]
    assert first["verdict"] == "pass", first
    # The user's tree after a session that changed nothing is the same project: the second
    # attach copies the references from the store, runs none, and judges the same.
    second = _session(db, project, counter, tmp_path)
    assert _count(counter) == 2 and _reused(second) == [True, True]
    assert [r["reused_from"]["run_id"] for r in second["reference"]] == \
        [r["run"] for r in first["reference"]]
    assert second["verdict"] == first["verdict"] and second["candidate"]["outcome"] == "passed"
    with Store(db) as store:
        runs = store.ledger(second["session"]).runs
        assert [runs[r["run"]].compute_usd for r in second["reference"]] == [0.0, 0.0]
        assert all(store.ledger(first["session"]).runs[r["run"]].compute_usd
                   for r in first["reference"])

    # --fresh-references: run again, whatever is stored (ended once its hooks are in).
    fresh = _Attach(db, project, counter, "--fresh-references")
    fresh.wait_hooked()
    fresh.proc.send_signal(signal.SIGTERM)
    fresh.proc.communicate(timeout=60)
    assert _count(counter) == 4
    with Store(db) as store:
        sid = store.resolve_session("last")
        starts = [e for e in store.events(sid)
                  if isinstance(e, ev.RunStarted) and e.role == "reference"]
    assert len(starts) == 2 and not any(e.reused_from for e in starts)
    assert all(e.reuse_key for e in starts)  # keyed still: a later attach may reuse them
