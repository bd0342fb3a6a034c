"""An imported Claude Code session verified on real CPU training runs of the tiny trainer:
`portside verify --session ID` runs the references on the project as it was before the session
and the candidate on the tree the session left. A session that tightened clipping and claimed
success ends with clipping-changed and agent-claim-contradicted; the user's tree is untouched.
The last test makes the session files with the real Claude Code CLI (the one claude-agent-sdk
bundles) against a loopback Messages API, and imports both its transcript and its stream-json."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cc_transcript import CLIP, TIGHT, clipping_port
from cli_run import cli as portside
from tiny_project import tiny_project
from treehash import tree_hash

from portside.core.log import events as ev
from portside.store import Store

pytestmark = pytest.mark.slow

PY = sys.executable
REF = f"{PY} train.py --steps 40"


def _project(tmp: Path, name: str = "proj") -> Path:
    return tiny_project(tmp / name)


def _as_claude_code_left_it(project: Path) -> None:
    """What the fixture's session did to the folder it ran in (Claude Code edits in place)."""
    train = project / "train.py"
    train.write_text(train.read_text(encoding="utf-8").replace(CLIP, TIGHT), encoding="utf-8")
    (project / "PORTING.md").write_text("# Port notes\n\nClipping tightened for XLA.\n")


def _verify_session(db: Path, imported: str) -> tuple[str, list[ev.Event]]:
    with Store(db) as store:
        rows = [r for r in store.sessions() if r["session_id"] != imported]
        assert len(rows) == 1
        sid = rows[0]["session_id"]
        return sid, list(store.events(sid))


def _alarms(events: list[ev.Event]) -> dict[str, str]:
    return {e.check: e.severity for e in events if isinstance(e, ev.AlarmRaised)}


def test_verify_imported_session_on_the_tree_it_left(tmp_path: Path) -> None:
    project = _project(tmp_path)
    s = clipping_port(project)
    transcript = s.write(tmp_path / f"{s.session_id}.jsonl")
    _as_claude_code_left_it(project)
    before = tree_hash(project)
    db = tmp_path / "p.db"
    assert portside("import", "--claude-code", str(transcript), db=db).returncode == 0
    imported = f"cc-{s.session_id}"
    # No --tree: the folder the session ran in, as it left it.
    res = portside("verify", "--session", imported, "--reference", REF, "--target", "cpu",
                   "--json", db=db, timeout=400)
    assert res.returncode == 1, res.stderr[-3000:]
    out = json.loads(res.stdout)
    assert out["verdict"] == "fail"
    sid, events = _verify_session(db, imported)
    alarms = _alarms(events)
    assert alarms.get("clipping-changed") == "error", alarms
    assert alarms.get("agent-claim-contradicted") == "critical", alarms
    started = events[0]
    assert isinstance(started, ev.SessionStarted)
    assert started.meta["verifies"] == imported
    assert started.meta["claude_code_session"] == s.session_id
    assert started.meta["edited_files"] == ["PORTING.md", "train.py"]
    runs = [e for e in events if isinstance(e, ev.RunStarted)]
    assert {r.role for r in runs} == {"reference", "candidate"}
    ref_cwd = next(r.cwd for r in runs if r.role == "reference")
    cand_cwd = next(r.cwd for r in runs if r.role == "candidate")
    assert ref_cwd != cand_cwd and str(project) not in (ref_cwd, cand_cwd)
    assert not Path(ref_cwd).exists() and not Path(cand_cwd).exists()  # the copies are gone
    assert tree_hash(project) == before  # the user's tree: never written
    with Store(db) as store:
        assert store.ledger(imported).interventions == 0


def test_trees_that_do_not_fit_the_transcript_are_refused(tmp_path: Path) -> None:
    project = _project(tmp_path)
    s = clipping_port(project)
    transcript = s.write(tmp_path / "t.jsonl")
    db = tmp_path / "p.db"
    assert portside("import", "--claude-code", str(transcript), db=db).returncode == 0
    imported = f"cc-{s.session_id}"
    # The folder was never edited: it is not the tree the session left.
    res = portside("verify", "--session", imported, "--reference", REF, "--target", "cpu", db=db)
    assert res.returncode == 2
    assert f"{project / 'PORTING.md'}: missing" in res.stderr, res.stderr
    # --before with a tree the session did not start from.
    other = _project(tmp_path, "other")
    (other / "train.py").write_text("print('something else')\n")
    res = portside("verify", "--session", imported, "--before", str(other), "--reference", REF,
                   "--target", "cpu", db=db)
    assert res.returncode == 2 and f"{other / 'train.py'}: different" in res.stderr, res.stderr
    # A session that is not an imported one.
    res = portside("verify", "--session", "nope", "--reference", REF, "--target", "cpu", db=db)
    assert res.returncode == 2 and "--session" in res.stderr
    with Store(db) as store:
        assert [r["session_id"] for r in store.sessions()] == [imported]  # nothing more written


def _bundled_cli() -> str:
    if os.environ.get("PORTSIDE_CI") and not __import__("importlib").util.find_spec(
            "claude_agent_sdk"):
        raise RuntimeError("CI: claude-agent-sdk (the claude-code extra) must be installed; "
                           "`make venv` installs it")
    pytest.importorskip("claude_agent_sdk", reason="the claude-code extra is not installed "
                        "(pip install -e '.[claude-code]'; `make venv` does)")
    import claude_agent_sdk

    found = glob.glob(str(Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"))
    if not found:
        pytest.skip("this claude-agent-sdk wheel bundles no CLI")
    return found[0]


def test_real_claude_code_session_imports_and_verifies(tmp_path: Path) -> None:
    """`claude -p --output-format stream-json --verbose` (the real CLI) reads train.py, tightens
    clipping, runs a command and claims success; its transcript and its log both import."""
    cli = _bundled_cli()
    from loopback_api import KEY, LoopbackAPI, text, tool

    project = _project(tmp_path)
    original = (project / "train.py").read_text(encoding="utf-8")
    pristine = tmp_path / "pristine"
    shutil.copytree(project, pristine)
    steps: list[Any] = [
        [text("Reading the script."), tool("toolu_r1", "Read", {"file_path": f"{project}/train.py"})],
        [tool("toolu_e1", "Edit", {"file_path": f"{project}/train.py", "old_string": CLIP,
                                   "new_string": TIGHT})],
        [tool("toolu_b1", "Bash", {"command": "echo ran-by-claude-code > marker.txt && cat "
                                   "marker.txt", "description": "Leave a marker"})],
        [text("Done: the port is complete and all checks pass.")],
    ]
    config = tmp_path / "claude-config"
    with LoopbackAPI(steps) as api:
        env = {**os.environ, **api.claude_code_env(config)}
        run = subprocess.run([cli, "-p", "Port train.py to TPU", "--output-format",
                              "stream-json", "--verbose", "--model", "claude-haiku-4-5",
                              "--permission-mode", "acceptEdits", "--allowedTools",
                              "Read,Edit,Bash"], cwd=project, env=env, capture_output=True,
                             text=True, timeout=180)
        assert run.returncode == 0, run.stderr[-3000:]
        assert not api.errors, api.errors
    assert (project / "marker.txt").exists()
    after = (project / "train.py").read_text(encoding="utf-8")
    assert after == original.replace(CLIP, TIGHT)  # what Claude Code really did
    log = tmp_path / "stream.jsonl"
    log.write_text(run.stdout)
    transcripts = sorted(config.glob("projects/*/*.jsonl"))
    assert len(transcripts) == 1
    result = [json.loads(x) for x in run.stdout.splitlines() if '"type":"result"' in x][-1]

    db = tmp_path / "p.db"
    for source, name in ((log, "from-log"), (transcripts[0], "from-transcript")):
        res = portside("import", "--claude-code", str(source), "--as", name, "--target", "tpu",
                       db=db)
        assert res.returncode == 0, res.stderr
        with Store(db) as store:
            events = list(store.events(name))
            led = store.ledger(name)
        kinds = [str(e.__struct_config__.tag) for e in events]
        assert kinds.count("agent.tool_call") == 3 and kinds.count("agent.tool_result") == 3
        assert [e.text for e in events if isinstance(e, ev.AgentText)] == [
            "Reading the script.", "Done: the port is complete and all checks pass."]
        edit = next(e for e in events if isinstance(e, ev.EditProposed) and e.path == "train.py")
        assert (edit.before, edit.after) == (original, after)
        command = next(e for e in events if isinstance(e, ev.CommandProposed))
        assert command.command.startswith("echo ran-by-claude-code")
        out = next(e for e in events if isinstance(e, ev.AgentToolResult)
                   and e.call_id == "toolu_b1")
        assert "ran-by-claude-code" in out.content
        started = events[0]
        assert isinstance(started, ev.SessionStarted)
        assert started.meta["claude_code_session"] == result["session_id"]
        assert started.meta["timing"] != "estimated"
        assert led.interventions == 0
        assert led.token_usd == pytest.approx(result["total_cost_usd"], rel=1e-6)
        assert led.tokens_in == result["usage"]["input_tokens"]
        assert KEY not in json.dumps([ev.to_builtins(e) for e in events])
    # Verified from the tree before (a copy of the project as it was): clipping-changed.
    res = portside("verify", "--session", "from-transcript", "--before", str(pristine),
                   "--reference", REF, "--target", "cpu", "--reference-runs", "1", db=db,
                   timeout=400)
    assert res.returncode == 1, res.stderr[-3000:]
    with Store(db) as store:
        sid = [r["session_id"] for r in store.sessions()
               if r["session_id"] not in ("from-log", "from-transcript")][0]
        alarms = _alarms(list(store.events(sid)))
    assert alarms.get("clipping-changed") == "error", alarms
    assert "agent-claim-contradicted" in alarms
