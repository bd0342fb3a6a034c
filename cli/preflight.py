"""Can the agent start? Asked before any run: a missing key or a logged-out CLI was found only
after both reference runs (hours on a real project), and then said in the SDK's words.

``preflight(agent)`` returns "" when the agent can start, else what is missing and how to fix
it, in one sentence a user can act on. Each check is cheap: the environment, a file on disk,
or the CLI's own status command (``claude auth status``: about 0.6 s, no network).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

AUTH_STATUS_S = 30.0  # `claude auth status` reads local files only; a hung one is a fault too


def preflight(agent: Any) -> str:
    kind = _kind(agent)
    if kind == "claude":
        return _claude_api(agent)
    if kind == "claude-code":
        return _claude_code(agent)
    if kind == "codex":
        return _codex(agent)
    return ""  # scripted (its file is read when built), attached (the user starts claude)


def _kind(agent: Any) -> str:
    try:
        return str(agent.spec().get("kind") or "")
    except Exception:  # an agent without a spec (a test double) has nothing to check here
        return ""


def _claude_api(agent: Any) -> str:
    if getattr(agent, "_client", None) is not None:
        return ""  # given its client (and so its key) by whoever built it
    if os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_AUTH_TOKEN"):
        return ""
    return ("--agent claude needs an Anthropic API key: ANTHROPIC_API_KEY is not set "
            "(export ANTHROPIC_API_KEY=sk-ant-…; a key from console.anthropic.com), "
            "or use --agent claude-code with a logged-in Claude Code")


def bundled_claude() -> str | None:
    """The Claude Code CLI the claude-agent-sdk wheel carries, as the SDK itself finds it."""
    try:
        import claude_agent_sdk
    except ImportError:
        return None
    path = Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"
    return str(path) if path.is_file() else shutil.which("claude")


def _claude_code(agent: Any) -> str:
    cli = getattr(agent, "cli_path", None) or bundled_claude()
    if not cli or not (Path(cli).is_file() or shutil.which(cli)):
        return (f"--agent claude-code: the Claude Code CLI was not found ({cli or 'none'}): "
                "pip install claude-agent-sdk (it bundles the CLI), or set PORTSIDE_CLAUDE_CLI "
                "to a `claude` executable")
    env = {**os.environ, **(agent.cli_env() if hasattr(agent, "cli_env") else {})}
    try:
        done = subprocess.run([cli, "auth", "status"], capture_output=True, text=True,
                              env=env, timeout=AUTH_STATUS_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return (f"--agent claude-code: `{cli} auth status` did not answer in "
                f"{AUTH_STATUS_S:.0f} s; run it yourself to see why")
    except OSError as exc:
        return f"--agent claude-code: {cli} cannot be started: {exc}"
    try:
        status = json.loads(done.stdout)
    except ValueError:
        return ""  # a CLI without the command (older, or another build): it cannot tell us
    if not isinstance(status, dict) or status.get("loggedIn") is not False:
        return ""
    where = status.get("configDirectory") or "~/.claude"
    return ("--agent claude-code: Claude Code is not logged in (`claude auth status`: "
            f"loggedIn false, config {where}): run `claude` and /login once, or set "
            "ANTHROPIC_API_KEY")


def _codex(agent: Any) -> str:
    from portside.core.codex.live import find_codex

    cli = getattr(agent, "cli_path", None) or find_codex()
    if not cli:
        return ("--agent codex: the Codex CLI was not found: npm install -g @openai/codex "
                "(then `codex login`), or set PORTSIDE_CODEX_CLI to a `codex` executable")
    return ""
