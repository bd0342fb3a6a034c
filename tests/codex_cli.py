"""Where the tests find the real Codex CLI: PORTSIDE_CODEX_CLI, `codex` on PATH, or the npm
install .ci/run makes (~/.cache/portside/codex). In CI (PORTSIDE_CI) with npm present a
missing CLI is an error, not a skip; without Node the tests skip and say why."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from portside.core.codex.live import find_codex

CACHED = Path.home() / ".cache" / "portside" / "codex" / "node_modules" / ".bin" / "codex"
CODEX = find_codex() or (str(CACHED) if CACHED.exists() else None)
if CODEX is None and os.environ.get("PORTSIDE_CI") and shutil.which("npm"):
    raise RuntimeError("CI: the Codex CLI must be installed (.ci/run: npm install "
                       "@openai/codex into ~/.cache/portside/codex, PORTSIDE_CODEX_CLI)")
SKIP_REASON = ("the Codex CLI is not installed (needs Node: npm install @openai/codex, or "
               "set PORTSIDE_CODEX_CLI)")
