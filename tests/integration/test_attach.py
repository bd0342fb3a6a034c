"""`portside attach`: the user's own `claude -p` (the CLI claude-agent-sdk bundles), run by the
test in the project as a user would, against a scripted loopback model
(tests/loopback_api.py), with portside answering the hooks it wrote into the project."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from cli_run import cli_popen

claude_agent_sdk = pytest.importorskip(
    "claude_agent_sdk", reason="the claude-code extra is not installed (`make venv` does)")

from doubles import MemorySink  # noqa: E402
from loopback_api import LoopbackAPI, text, tool  # noqa: E402
from tiny_project import tiny_project  # noqa: E402

from portside.core.claude_code.attached import AttachedClaudeCode  # noqa: E402
from portside.core.log import events as ev  # noqa: E402
from portside.core.session.engine import SessionConfig, SessionEngine  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable
CLI = Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"
KEY = "sk-ant-api03-LOOPBACK-ATTACH-0123456789abcdef"
MODEL = "claude-haiku-4-5"
CLIP = 'p.add_argument("--max-norm", type=float, default=1.0)'
TIGHT = 'p.add_argument("--max-norm", type=float, default=0.05)'
USER_SETTINGS = b'{\n  "permissions": {"allow": ["Read"]}\n}\n'


def _project(tmp: Path) -> Path:
    project = tiny_project(tmp / "proj")
    (project / ".claude").mkdir()
    (project / ".claude" / "settings.local.json").write_bytes(USER_SETTINGS)
    return project


def _claude(api: LoopbackAPI, tmp: Path, project: Path) -> subprocess.Popen[bytes]:
    """The user's `claude -p`, in their project, with their (test) config dir."""
    env = {**os.environ, "ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": api.url,
           "CLAUDE_CONFIG_DIR": str(tmp / "claude-config"), "DISABLE_TELEMETRY": "1",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1",
           "DISABLE_ERROR_REPORTING": "1"}
    return subprocess.Popen([str(CLI), "-p", "port train.py to XLA", "--model", MODEL,
                             "--output-format", "stream-json", "--verbose"], cwd=project,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _mentioned(body: dict[str, Any], needle: str) -> bool:
    return needle in json.dumps(body.get("messages", []))


@pytest.mark.slow  # two real trainer runs under the sandbox (~40 s each on a loaded machine)
@pytest.mark.heavy  # a whole real agent CLI session (make test-slow)
def test_attach_gates_the_users_claude_and_checks_its_stop(tmp_path: Path) -> None:
    """The edit is a card (disk unchanged while it is shown), a rejection's reason reaches the
    model, the approved edit lands in the user's tree; the Stop is refused with the clipping
    evidence and agent-claim-contradicted raised; the user's settings are back byte for byte."""
    project = _project(tmp_path)
    train = str(project / "train.py")

    steps = [
        [tool("r1", "Read", {"file_path": train})],
        [tool("e1", "Edit", {"file_path": train, "old_string": "import argparse",
                             "new_string": "import argparse  # xla"})],
        lambda b: ([tool("e2", "Edit", {"file_path": train, "old_string": CLIP,
                                        "new_string": TIGHT})]
                   if _mentioned(b, "comments are noise") else [text("reason lost")]),
        [text("Ported to XLA; all checks pass, numerics unchanged.")],
        [text("Done, the port is complete.")],
        [text("Done, the port is complete.")],
        [text("Done, the port is complete.")],
    ]
    sink = MemorySink()
    agent = AttachedClaudeCode(project, max_stop_blocks=1)
    config = SessionConfig(project=project, target="cpu", reference_command=f"{PY} train.py --steps 30",
                           reference_runs=1, agent=agent, policy="ask", mode="headless",
                           isolate=True, workdir=tmp_path / "work", stall_s=60)
    engine = SessionEngine(config, sink)
    seen: list[tuple[str, str, str]] = []  # (path, after, the user's file then)

    async def reviewer() -> None:
        answers = ["reject", "approve"]
        while True:
            await asyncio.sleep(0.05)
            gate = engine.gate
            if gate.pending_claim() is not None:
                gate.verdict("fail" if gate.open_errors() else "pass", "checked")
            for item in gate.pending_edits():
                p = next(e for e in reversed(sink.events) if isinstance(e, ev.EditProposed)
                         and e.edit_id == item.item_id)
                seen.append((p.path, p.after, (project / p.path).read_text()))
                if answers.pop(0) == "reject":
                    gate.reject(item.item_id, "comments are noise")
                else:
                    gate.approve(item.item_id)

    with LoopbackAPI(steps) as api:
        ready = asyncio.Event()

        async def main() -> Any:
            loop = asyncio.get_running_loop()
            agent.on_ready = lambda url: loop.call_soon_threadsafe(ready.set)
            run = asyncio.create_task(engine.run())
            rev = asyncio.create_task(reviewer())
            await asyncio.wait_for(ready.wait(), 120)
            hooked = json.loads((project / ".claude" / "settings.local.json").read_text())
            assert hooked["permissions"] == {"allow": ["Read"]}  # theirs kept
            assert "claude_code/hook_client.py" in json.dumps(hooked["hooks"]["PreToolUse"])
            proc = await asyncio.to_thread(_claude, api, tmp_path, project)
            out = await asyncio.to_thread(proc.communicate, None, 240)
            try:
                return await asyncio.wait_for(run, 60), out[0]
            finally:
                rev.cancel()

        result, out = asyncio.run(main())
        assert not api.errors, api.errors
        blocked = [b for b in api.conversation if _mentioned(b, "Stop hook feedback")]
    events = sink.events
    # The comment edit: a card while the user's file was unchanged, rejected, file untouched.
    assert seen[0][0] == "train.py" and "# xla" in seen[0][1] and "# xla" not in seen[0][2]
    # The clipping edit: approved, and it landed in the user's own tree (their choice of mode).
    assert TIGHT in seen[1][1] and TIGHT not in seen[1][2]
    assert TIGHT in (project / "train.py").read_text()
    assert "# xla" not in (project / "train.py").read_text()
    assert [e.path for e in events if isinstance(e, ev.EditApplied)] == ["train.py"]
    # The Stop: refused with the clipping evidence, which the model received.
    assert blocked, out.decode(errors="replace")[-3000:]
    assert "clipping-changed" in json.dumps(blocked[0]["messages"])
    checks = {e.check for e in events if isinstance(e, ev.AlarmRaised)}
    assert {"clipping-changed", "agent-claim-contradicted"} <= checks
    assert any(isinstance(e, ev.SessionState) and e.state == "agent-stop-blocked" for e in events)
    states = [e.state for e in events if isinstance(e, ev.SessionState)]
    assert "attached" in states and "agent-session-ended" in states
    assert result.verdict == "fail"
    # The reference ran on the tree as it was before the session.
    assert CLIP in (engine.workdir / "reference" / "train.py").read_text()
    # The user's settings are theirs again, byte for byte; the key reached nothing.
    assert (project / ".claude" / "settings.local.json").read_bytes() == USER_SETTINGS
    assert not (project / ".claude" / "settings.local.json.portside").exists()
    assert KEY not in json.dumps([ev.to_builtins(e) for e in events])


@pytest.mark.slow  # portside attach and claude -p each start in full (~45 s on a loaded machine)
@pytest.mark.heavy  # a whole real agent CLI session (make test-slow)
def test_attach_fails_closed_when_portside_is_gone(tmp_path: Path) -> None:
    """`portside attach` killed with its hooks still written: the user's next Bash is blocked,
    not run; the next attach puts the user's settings back first."""
    project = _project(tmp_path)
    marker = project / "MARKER"
    db = tmp_path / "s.db"
    proc = cli_popen("attach", str(project), "--reference", "true", "--reference-runs", "1",
                     "--headless", "--policy", "auto", "--no-sandbox", db=db, text=False)
    settings = project / ".claude" / "settings.local.json"
    deadline = time.monotonic() + 60
    while b"claude_code/hook_client.py" not in (settings.read_bytes() if settings.exists() else b""):
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()  # communicate() on a live attach would wait for ever
            pytest.fail("hooks never written: " + proc.communicate()[1][-2000:].decode(errors="replace"))
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    with LoopbackAPI([[tool("b1", "Bash", {"command": f"touch {marker}"})],
                      lambda b: [text("blocked: " + str(_mentioned(b, "not answering")))]]) as api:
        cc = _claude(api, tmp_path, project)
        out = cc.communicate(timeout=120)[0].decode(errors="replace")
        assert not api.errors, api.errors
        assert _mentioned(api.conversation[-1], "portside is not answering"), out[-3000:]
    assert not marker.exists()
    # What the next attach does first: the user's settings back, byte for byte.
    from portside.core.claude_code.attach_hooks import install, uninstall

    inst = install(project, "http://127.0.0.1:9/x")
    assert inst.recovered.startswith("restored")
    uninstall(inst)
    assert settings.read_bytes() == USER_SETTINGS
