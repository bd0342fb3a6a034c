"""Resuming a Claude Code session: an approved edit that the kill caught after Claude Code wrote
it but before portside recorded it is recorded as applied, once, only when the workspace file
holds exactly the approved text (a real workspace copy)."""

from __future__ import annotations

from pathlib import Path

from portside.core.claude_code.live import ClaudeCodeAgent
from portside.core.log import events as ev
from portside.core.workspace.workspace import Workspace

SID = "20261201-restore-0001"


class Host:
    def __init__(self, ws: Workspace) -> None:
        self.workspace, self.session_id = ws, SID
        self.published: list[ev.Event] = []

    def publish(self, e: ev.Event) -> ev.Event:
        self.published.append(e)
        return e


def _log(decision: str = "approved", after: str | None = None) -> list[ev.Event]:
    return [
        ev.SessionStarted(session_id=SID, project="/p", target="tpu", agent="claude-code"),
        ev.AgentToolCall(session_id=SID, call_id="e1", name="Edit", input={}),
        ev.EditProposed(session_id=SID, edit_id="ed-1", path="train.py", before="a\n",
                        after="b\n"),
        ev.EditDecided(session_id=SID, edit_id="ed-1", decision=decision, after=after),  # type: ignore[arg-type]
        # A command decided before the kill is not a file edit: nothing to record for it.
        ev.CommandProposed(session_id=SID, command_id="cmd-1", command="ls"),
        ev.EditDecided(session_id=SID, edit_id="cmd-1", decision="approved"),
    ]


def _ws(tmp: Path, text: str) -> Workspace:
    project = tmp / "project"
    project.mkdir()
    (project / "train.py").write_text("a\n")
    ws = Workspace.create(project, tmp / "ws", name="w")
    (ws.root / "train.py").write_text(text)  # what Claude Code left on disk
    return ws


def test_written_before_the_kill_is_recorded_applied(tmp_path: Path) -> None:
    host = Host(_ws(tmp_path, "b\n"))
    agent = ClaudeCodeAgent()
    agent.restore(_log(), host)  # type: ignore[arg-type]
    assert agent.resume
    assert [(type(e), getattr(e, "edit_id", "")) for e in host.published] == [
        (ev.EditApplied, "ed-1")]


def test_the_reviewers_version_counts_and_an_unwritten_edit_is_not_recorded(
        tmp_path: Path) -> None:
    host = Host(_ws(tmp_path, "a\n"))  # the kill came before Claude Code wrote the file
    ClaudeCodeAgent().restore(_log(), host)  # type: ignore[arg-type]
    assert host.published == []
    host.workspace.root.joinpath("train.py").write_text("c\n")
    ClaudeCodeAgent().restore(_log("edited", "c\n"), host)  # type: ignore[arg-type]
    assert [getattr(e, "edit_id", "") for e in host.published] == ["ed-1"]


def test_an_applied_or_rejected_edit_is_left_alone(tmp_path: Path) -> None:
    host = Host(_ws(tmp_path, "b\n"))
    log = _log() + [ev.EditApplied(session_id=SID, edit_id="ed-1", path="train.py")]
    ClaudeCodeAgent().restore(log, host)  # type: ignore[arg-type]
    ClaudeCodeAgent().restore(_log("rejected"), host)  # type: ignore[arg-type]
    assert host.published == []
