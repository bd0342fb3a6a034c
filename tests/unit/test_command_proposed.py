"""Command proposals are their own kind (`command.proposed`), decided like an edit and never
counted as one; logs from before it (`edit.proposed` with path `$ <cwd>`) still read as commands."""

from __future__ import annotations

from pathlib import Path

from portside.core.log import events as ev
from portside.core.log.render import event_text
from portside.core.replay.state import ReplayState
from portside.store import Store
from portside.store.exports import report_md
from portside.tui.model import SessionModel

SID = "20261201-cmd-0001"


def _log() -> list[ev.Event]:
    raw: list[ev.Event] = [
        ev.SessionStarted(session_id=SID, project="/p", target="tpu", agent="claude-code"),
        ev.EditProposed(session_id=SID, edit_id="e1", path="train.py", before="a\n",
                        after="b\n"),
        ev.EditDecided(session_id=SID, edit_id="e1", decision="approved"),
        ev.EditApplied(session_id=SID, edit_id="e1", path="train.py"),
        ev.CommandProposed(session_id=SID, command_id="cmd-1", command="pytest -q", cwd=".",
                           description="run the tests"),
        ev.EditDecided(session_id=SID, edit_id="cmd-1", decision="rejected",
                       reason="no tests yet"),
        # How an older portside wrote a command: an edit.proposed with path "$ <cwd>".
        ev.EditProposed(session_id=SID, edit_id="cmd-old", path="$ sub", before="",
                        after="ls -la", rationale="look around"),
        ev.EditDecided(session_id=SID, edit_id="cmd-old", decision="approved", by="policy"),
    ]
    for i, e in enumerate(raw, 1):
        e.seq, e.ts = i, 1_780_000_000.0 + i
    return raw


def test_the_codec_keeps_the_new_kind() -> None:
    e = _log()[4]
    back = ev.decode(ev.encode(e))
    assert isinstance(back, ev.CommandProposed) and back == e
    assert ev.to_builtins(e)["kind"] == "command.proposed"


def test_legacy_form_reads_as_a_command_and_edits_stay_edits() -> None:
    log = _log()
    legacy = ev.as_command(log[6])
    assert legacy is not None and (legacy.command_id, legacy.command, legacy.cwd,
                                   legacy.description) == ("cmd-old", "ls -la", "sub",
                                                           "look around")
    assert ev.as_command(log[1]) is None and ev.is_file_edit(log[1])
    assert not ev.is_file_edit(log[6]) and not ev.is_file_edit(log[4])
    # A file whose name starts with "$ " but that has a before is still an edit.
    odd = ev.EditProposed(session_id=SID, edit_id="e9", path="$ x", before="old", after="new")
    assert ev.is_file_edit(odd)
    assert event_text(log[4]).startswith("command cmd-1 proposed in .: $ pytest -q")
    assert event_text(log[6]).startswith("command cmd-old proposed in sub: $ ls -la")


def test_replay_state_counts_commands_apart() -> None:
    state = ReplayState()
    for e in _log():
        state.apply(e)
    assert list(state.edits) == ["e1"]
    assert {k: (c.command, c.status) for k, c in state.commands.items()} == {
        "cmd-1": ("pytest -q", "rejected"), "cmd-old": ("ls -la", "approved")}
    copy = state.copy()  # seek snapshots keep them too
    assert copy.commands == state.commands and copy.commands is not state.commands


def test_live_model_counts_commands_apart() -> None:
    model = SessionModel()
    for e in _log():
        model.apply(e)
    assert list(model.edits) == ["e1"]
    assert [(c.event.command, c.status) for c in model.commands.values()] == [
        ("pytest -q", "rejected"), ("ls -la", "approved")]
    assert not model.undecided()
    model.apply(ev.CommandProposed(session_id=SID, seq=99, command_id="cmd-2", command="make"))
    assert model.undecided() and model.pending_edits() == []
    assert model.proposal("cmd-2") is model.commands["cmd-2"]


def test_report_lists_commands_and_keeps_them_out_of_the_edits(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    for e in _log():
        e.seq = 0
        store.recorder.append(e)
    store.recorder.flush()
    text = report_md(store, SID)
    store.close()
    section = text.split("## Commands", 1)[1].split("\n## ", 1)[0]
    assert "| `pytest -q` | . | rejected | reviewer | no tests yet |" in section
    assert "| `ls -la` | sub | approved | policy |  |" in section
    risks = text.split("## Risk marks on edits", 1)[1].split("\n## ", 1)[0]
    assert "$ sub" not in risks and "cmd-" not in risks
