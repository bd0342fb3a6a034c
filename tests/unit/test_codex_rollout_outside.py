"""`import --codex` reads nothing outside the session's folder (issue 38.11).

A rollout is a file anyone can write: its ``cwd`` and the paths of its patches are the writer's
choice. Before the fix, a declined ``update`` whose "diff" held no hunk stored the whole text
of the host file it named (any absolute path, ``..``, or a link in the folder leading out) as
the edit's before and after; a FIFO named in the folder held the import forever."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from portside.core.codex.rollout import OUTSIDE, read_codex
from portside.core.log import events as ev

SECRET = "root:$6$SECRET-HASH-THAT-MUST-NOT-BE-STORED:19000:0:99999:7:::\n"
TS = "2026-01-05T10:00:00.000Z"


def _rollout(path: Path, cwd: str, changes: list[tuple[str, dict[str, Any], str]]) -> Path:
    lines: list[dict[str, Any]] = [
        {"timestamp": TS, "type": "session_meta", "payload": {"id": "thr-1", "cwd": cwd}},
        {"timestamp": TS, "type": "turn_context", "payload": {"model": "gpt-5.5"}}]
    for n, (name, change, status) in enumerate(changes):
        lines.append({"timestamp": TS, "type": "event_msg", "payload": {
            "type": "item_completed", "item": {"type": "FileChange", "id": f"p{n}",
                                               "status": status, "changes": {name: change}}}})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def _edits(events: list[ev.Event]) -> list[ev.EditProposed]:
    return [e for e in events if isinstance(e, ev.EditProposed)]


def test_paths_outside_the_folder_are_never_read(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    host = tmp_path / "host-shadow"  # a 0600 file of the host, outside the session's folder
    host.write_text(SECRET)
    host.chmod(0o600)
    (tmp_path / "other").write_text(SECRET)
    os.symlink(host, project / "link.py")  # inside by name, outside by target
    (project / "train.py").write_text("a = 1\nb = 2\n")  # after the applied patch
    no_hunk = {"type": "update", "unified_diff": "-"}
    rollout = _rollout(tmp_path / "r.jsonl", str(project), [
        (str(host), no_hunk, "declined"),
        ("../other", no_hunk, "completed"),
        (str(project / "link.py"), no_hunk, "declined"),
        ("train.py", {"type": "update", "unified_diff": "@@ -2 +2 @@\n-b = 1\n+b = 2\n"},
         "completed")])
    events = read_codex(rollout)
    assert SECRET.strip() not in json.dumps([ev.to_builtins(e) for e in events])
    edits = _edits(events)
    outside = [e for e in edits if e.path != "train.py"]
    assert len(outside) == 3
    assert all(OUTSIDE in e.rationale and e.before == "" and e.after == "-" for e in outside)
    meta = events[0].meta  # type: ignore[attr-defined]
    assert sorted(meta["outside_edits"]) == sorted(e.path for e in outside)
    # Inside the folder the whole texts are rebuilt as before.
    train = next(e for e in edits if e.path == "train.py")
    assert (train.before, train.after) == ("a = 1\nb = 1\n", "a = 1\nb = 2\n")


def test_a_folder_of_slash_reads_nothing(tmp_path: Path) -> None:
    host = tmp_path / "host-shadow"
    host.write_text(SECRET)
    rollout = _rollout(tmp_path / "r.jsonl", "/", [
        (str(host).lstrip("/"), {"type": "update", "unified_diff": "-"}, "declined")])
    events = read_codex(rollout)
    assert SECRET.strip() not in json.dumps([ev.to_builtins(e) for e in events])
    assert OUTSIDE in _edits(events)[0].rationale


@pytest.mark.timeout(20)
def test_a_fifo_in_the_folder_is_not_waited_on(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    os.mkfifo(project / "pipe.py")
    rollout = _rollout(tmp_path / "r.jsonl", str(project), [
        ("pipe.py", {"type": "update", "unified_diff": "@@ -1 +1 @@\n-a\n+b\n"}, "declined")])
    events = read_codex(rollout)  # before the fix: blocked in open() for good
    edit = _edits(events)[0]
    assert edit.path == "pipe.py" and "no longer holds the text" in edit.rationale
