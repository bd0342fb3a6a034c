"""Codex under review: the real Codex CLI (npm @openai/codex; PORTSIDE_CODEX_CLI or `codex` on
PATH) through `codex app-server`, against a scripted loopback Responses API
(tests/loopback_responses.py), in a real workspace with real runs of the tiny trainer."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from codex_cli import CODEX, SKIP_REASON
from doubles import MemorySink
from gate_reviewer import Reviewer, tree_bytes
from loopback_responses import (
    LoopbackResponses,
    codex_home,
    message,
    patch,
    request_text,
    shell,
)

from portside.core.codex.live import CodexAgent, apply_diff
from portside.core.log import events as ev
from portside.core.session.engine import SessionConfig, SessionEngine

needs_codex = pytest.mark.skipif(CODEX is None, reason=SKIP_REASON)

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "fixtures" / "trainers" / "train_tiny.py"
PY = sys.executable
KEY = "sk-proj-LOOPBACK0CODEX0SECRET0123456789"
CLIP = '    p.add_argument("--max-norm", type=float, default=1.0)'
TIGHT = '    p.add_argument("--max-norm", type=float, default=0.05)'


def test_apply_diff_matches_and_refuses() -> None:
    before = "a\nb\nc\nd\n"
    assert apply_diff(before, "@@ -2,2 +2,2 @@\n b\n-c\n+C\n") == "a\nb\nC\nd\n"
    assert apply_diff(before, "@@ -1 +1,2 @@\n a\n+a2\n@@ -4 +5 @@\n-d\n+D\n") == \
        "a\na2\nb\nc\nD\n"
    with pytest.raises(ValueError):
        apply_diff(before, "@@ -2 +2 @@\n-x\n+y\n")


@needs_codex
@pytest.mark.slow  # two real trainer runs under the sandbox (~40 s each on a loaded machine)
@pytest.mark.heavy  # a whole real agent CLI session (make test-slow)
def test_codex_gated_rejections_reach_it_and_its_claim_is_checked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A patch is a card before Codex writes it, and a rejection's reason reaches the model; a
    command is a command card, rejected, never run; the approved patch tightens clipping: the
    stop is refused with clipping-changed, the claim is contradicted, the verdict is fail,
    usage is recorded, the user's project is byte-identical and the key is in no event."""
    project = tmp_path / "proj"
    project.mkdir()
    shutil.copy(TINY, project / "train.py")
    before = tree_bytes(project)

    def tighten(b: dict[str, Any]) -> list[dict[str, Any]]:
        assert "comments are noise" in request_text(b), "the rejection's reason was lost"
        return [patch(f"*** Update File: train.py\n@@\n-{CLIP}\n+{TIGHT}")]

    def marker(b: dict[str, Any]) -> list[dict[str, Any]]:
        return [shell("touch MARKER")]

    def claim(b: dict[str, Any]) -> list[dict[str, Any]]:
        assert "no markers" in request_text(b), "the command's rejection reason was lost"
        return [message("Ported to XLA; all checks pass, numerics unchanged.")]

    def after_block(b: dict[str, Any]) -> list[dict[str, Any]]:
        assert "clipping-changed" in request_text(b), "the stop's evidence was not sent"
        return [message("Done, the port is complete.")]

    steps = [[message("Marking the port."),
              patch("*** Update File: train.py\n@@\n-import argparse\n+import argparse  # xla")],
             tighten, marker, claim, after_block]
    sink = MemorySink()
    with LoopbackResponses(steps, usage={"input": 1000, "cached": 400, "output": 50}) as api:
        monkeypatch.setenv("CODEX_HOME", str(codex_home(tmp_path / "codex-home", api.url)))
        monkeypatch.setenv("LOOPBACK_OPENAI_KEY", KEY)
        agent = CodexAgent("gpt-5.5", max_stop_blocks=1, cli_path=CODEX)
        config = SessionConfig(project=project, target="cpu",
                               reference_command=f"{PY} train.py --steps 30", reference_runs=1,
                               agent=agent, policy="ask", mode="headless", isolate=True,
                               workdir=tmp_path / "work", stall_s=60)
        engine = SessionEngine(config, sink)

        reviewer = Reviewer(engine, sink.events, [("reject", "comments are noise"),
                                                  ("approve", ""), ("reject", "no markers")])
        result = reviewer.session(400)
        seen = reviewer.seen
        assert not api.errors, api.errors
    events = sink.events
    ws = engine.workspace
    assert ws is not None
    # The rejected patch: a card with a real diff while the file was unchanged; never written.
    assert seen[0][0] == "train.py" and "# xla" in seen[0][1] and "# xla" not in str(seen[0][2])
    # The approved one: shown before the disk changed, then applied by Codex itself.
    assert TIGHT in seen[1][1] and CLIP in str(seen[1][2])
    assert TIGHT in ws.read_file("train.py") and "# xla" not in ws.read_file("train.py")
    assert [e.path for e in events if isinstance(e, ev.EditApplied)] == ["train.py"]
    # The command: a command card, rejected, never run.
    assert seen[2][0].startswith("$") and "touch MARKER" in seen[2][1]
    assert [c.command for c in events if isinstance(c, ev.CommandProposed)] == [seen[2][1]]
    assert not (ws.root / "MARKER").exists()
    checks = {e.check for e in events if isinstance(e, ev.AlarmRaised)}
    assert {"clipping-changed", "agent-claim-contradicted"} <= checks
    assert any(isinstance(e, ev.SessionState) and e.state == "agent-stop-blocked"
               for e in events)
    assert result.verdict == "fail"
    usage = [e for e in events if isinstance(e, ev.AgentUsage)]
    assert len(usage) == len(api.requests)
    assert sum(u.cache_read_tokens for u in usage) == 400 * len(api.requests)
    assert sum(u.input_tokens for u in usage) == 600 * len(api.requests)
    assert any(isinstance(e, ev.SessionState) and agent.thread_id in e.detail for e in events)
    assert tree_bytes(project) == before
    assert KEY not in json.dumps([ev.to_builtins(e) for e in events])
    assert all(h.get("authorization") == f"Bearer {KEY}" for h in api.headers)
