"""prepare_trees confines every path the stored events name, whoever wrote them: a recording
edited by hand (relative ``..``, absolute) is left out of the copies, and a symlink inside a copy
cannot lead a write out."""

from __future__ import annotations

import hashlib
from pathlib import Path

from cc_transcript import CLIP, TIGHT, Session, text, tool

from portside.core.claude_code.transcript import read_claude_code
from portside.core.claude_code.trees import prepare_trees, split_edits
from portside.core.log import events as ev

TRAIN = f"import torch\n{CLIP}\n"


def _events(tmp_path: Path, project: Path) -> list[ev.Event]:
    s = Session(project)
    s.reply(tool("toolu_e", "Edit", file_path=f"{project}/train.py", old_string=CLIP,
                 new_string=TIGHT))
    s.edit("toolu_e", "train.py", TRAIN, CLIP, TIGHT)
    s.reply(tool("toolu_n", "Edit", file_path=f"{project}/notes.py", old_string="a",
                 new_string="b"))
    s.edit("toolu_n", "notes.py", "a\n", "a", "b")
    s.reply(text("done"))
    return read_claude_code(s.write(tmp_path / "t.jsonl"))


def test_hand_edited_paths_and_symlinks_never_lead_a_write_out(tmp_path: Path) -> None:
    project, outside = tmp_path / "p", tmp_path / "outside"
    project.mkdir()
    outside.mkdir()
    (project / "train.py").write_text(TRAIN)
    (outside / "victim.py").write_text("a\n")
    events = _events(tmp_path, project)
    notes = next(e for e in events if isinstance(e, ev.EditProposed) and e.path == "notes.py")
    notes.path = "../outside/victim.py"  # as a hand-edited recording could say
    for e in events:
        if isinstance(e, ev.EditApplied) and e.path == "notes.py":
            e.path = notes.path
    files, out = split_edits(events, project)
    assert sorted(files) == ["train.py"] and out == ["../outside/victim.py"]
    # train.py in the copy is a link to the outside file: the write must not follow it.
    (outside / "train.py").write_text(TRAIN)
    before = hashlib.sha256((outside / "train.py").read_bytes()).hexdigest()
    (project / "train.py").unlink()
    (project / "train.py").symlink_to(outside / "train.py")
    files, out = split_edits(events, project)
    assert files == {} and sorted(out) == ["../outside/victim.py", "train.py"]
    try:
        prepare_trees(events, tmp_path / "dest", tree_before=project)
    except ValueError as exc:
        assert "no edit inside its folder" in str(exc)
    else:
        raise AssertionError("a tree whose only edit leads out was rebuilt")
    assert hashlib.sha256((outside / "train.py").read_bytes()).hexdigest() == before
    assert (outside / "victim.py").read_text() == "a\n"
