"""Agent preflight (issue 41 item 8): an agent that cannot start is refused before any run,
exit 2 (a setup error), naming what is missing and how to fix it. The real bundled Claude Code
CLI with an empty HOME is logged out; before, both reference runs ran first (hours on a real
project) and the session ended "failed-error" with the reason only in `show`."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
from cli_run import cli

from portside.cli.preflight import bundled_claude, preflight
from portside.core.claude_code.live import ClaudeCodeAgent

# A reference that leaves a mark: it must never run.
MARK = f"{sys.executable} -c \"open('reference-ran', 'w').write('x')\""


def _env(home: Path, **extra: str) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items()
            if k in ("PATH", "PYTHONPATH", "LANG", "TMPDIR")}
    return {**keep, "HOME": str(home), **extra}


@pytest.mark.parametrize(("agent", "extra", "said"), [
    ("claude", {}, "ANTHROPIC_API_KEY is not set"),
    ("claude-code", {}, "Claude Code is not logged in"),
    ("codex", {"PATH": "/usr/bin:/bin"}, "the Codex CLI was not found"),
])
def test_an_agent_that_cannot_start_is_refused_before_any_run(
        tmp_path: Path, agent: str, extra: dict[str, str], said: str) -> None:
    if agent == "claude-code" and bundled_claude() is None:
        pytest.skip("claude-agent-sdk's bundled CLI is not installed")
    project = tmp_path / "p"
    project.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    env = _env(home, **extra)
    env.pop("PORTSIDE_CODEX_CLI", None)
    t0 = time.monotonic()
    res = cli("run", str(project), "--target", "cpu", "--agent", agent, "--reference", MARK,
              "--headless", "--policy", "runs-only", "--no-sandbox", db=tmp_path / "s.db",
              cwd=project, env=env, timeout=300)
    assert res.returncode == 2, (res.returncode, res.stderr[-2000:])
    assert said in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert not (project / "reference-ran").exists()  # no run started
    assert time.monotonic() - t0 < 60


def test_claude_code_with_a_key_passes_the_preflight(tmp_path: Path) -> None:
    """The same empty HOME with ANTHROPIC_API_KEY set: the CLI says it is logged in (api_key),
    so the check does not refuse what would start."""
    if bundled_claude() is None:
        pytest.skip("claude-agent-sdk's bundled CLI is not installed")
    agent = ClaudeCodeAgent(None, env={"HOME": str(tmp_path), "ANTHROPIC_API_KEY": "sk-ant-x"})
    assert preflight(agent) == ""
    logged_out = ClaudeCodeAgent(None, env={"HOME": str(tmp_path)})
    if not os.environ.get("ANTHROPIC_API_KEY"):
        assert "not logged in" in preflight(logged_out)


def test_resume_checks_the_agent_before_any_run(tmp_path: Path) -> None:
    """`run --resume` rebuilds the agent from the log: without its key it is refused at once
    (exit 2, naming the variable), before the references run again."""
    import signal
    import subprocess

    from cli_run import cli_popen

    from portside.store import Store

    project = tmp_path / "p"
    project.mkdir()
    (project / "train.py").write_text("print('x')\n")
    home = tmp_path / "home"
    home.mkdir()
    db = tmp_path / "s.db"
    # A session with the built-in Claude agent (a key that reaches nothing) whose references
    # sleep: portside is killed while they run, so the session is left open, resumable.
    env = _env(home, ANTHROPIC_API_KEY="sk-ant-test", ANTHROPIC_BASE_URL="http://127.0.0.1:9")
    proc = cli_popen("run", str(project), "--target", "cpu", "--agent", "claude",
                     "--reference", "sleep 300", "--headless", "--policy", "auto", db=db,
                     env=env)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no reference started"
            if db.exists():
                with Store(db) as store:
                    runs = [r for s in store.sessions() for r in store.runs(s["session_id"])]
                if runs:
                    break
            time.sleep(0.3)
        proc.send_signal(signal.SIGKILL)  # the engine dies: the session stays open
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    with Store(db) as store:
        (sid,) = [s["session_id"] for s in store.sessions()]
        before = len(list(store.events(sid)))
    res = cli("run", "--resume", sid, "--headless", db=db, env=_env(home), timeout=120)
    assert res.returncode == 2, (res.returncode, res.stderr[-2000:])
    assert "ANTHROPIC_API_KEY" in res.stderr, res.stderr
    with Store(db) as store:
        assert len(list(store.events(sid))) == before  # nothing ran, nothing was written
    subprocess.run(["pkill", "-f", "sleep 300"], check=False)
