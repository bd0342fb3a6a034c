"""`portside import --claude-code FILE` and `portside verify --session ID`: thin glue over
core/claude_code/transcript.py and core/claude_code/trees.py."""

from __future__ import annotations

import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import click


def _usage_error(message: str) -> NoReturn:
    from portside.core.safety.terminal_text import clean_line

    click.echo(f"portside: {clean_line(message)}", err=True)
    sys.exit(2)


def import_claude_code(store: Any, file: Path, rename_to: str | None, target: str | None) -> str:
    """Read the whole transcript or log, then write it in one transaction: a malformed file
    (exit 2, ``file:line: what``) or a session already present writes nothing."""
    from portside.core.agent.imported import TranscriptError
    from portside.core.claude_code.transcript import read_claude_code
    from portside.store import StoreError
    from portside.store.jsonl import import_events, session_id_problem

    if rename_to and (problem := session_id_problem(rename_to)):
        _usage_error(f"--as: {problem}")
    try:
        events = read_claude_code(file, session_id=rename_to, target=target or "")
        if problem := session_id_problem(events[0].session_id):
            raise TranscriptError(f"{file}:1: session id: {problem}")
        sid = import_events(store, events, str(file))
    except (TranscriptError, StoreError) as exc:
        store.close()
        _usage_error(str(exc))
    _say_notes(getattr(events[0], "meta", {}).get("import_notes", []))
    return sid


def _say_notes(notes: list[str]) -> None:
    """What the import skipped (repeated lines) is said, not only kept in the metadata."""
    from portside.core.safety.terminal_text import clean_line

    for note in notes:
        click.echo(f"portside: note: {clean_line(note)}", err=True)


@dataclass
class ImportedTrees:
    """The reference and candidate trees of an imported session, in a folder of their own
    (removed by :meth:`close`)."""

    reference: Path
    candidate: Path
    meta: dict[str, Any]
    claim: str
    home: Path
    notes: list[str] = field(default_factory=list)

    def apply(self, config: Any) -> None:
        config.candidate_cwd = self.candidate
        config.meta.update(self.meta)
        config.claim = self.claim
        config.title = f"verify {self.meta['verifies']}"

    def close(self) -> None:
        shutil.rmtree(self.home, ignore_errors=True)


def imported_trees(store: Any, session: str, tree: Path | None, before: Path | None
                   ) -> ImportedTrees:
    from portside.core.claude_code.attached_trees import is_attached
    from portside.core.claude_code.trees import (
        TreeError,
        imported_claim,
        prepare_trees,
        verify_meta,
    )
    from portside.core.log import events as ev
    from portside.store import StoreError

    from .options import is_utf8, shown

    try:
        if not is_utf8(session):  # bytes no session id holds (SQLite cannot even take them)
            _usage_error(f"--session: {shown(store.path)}: no session matches '{shown(session)}'")
        sid = store.resolve_session(session)
        events = list(store.events(sid))
    except StoreError as exc:
        _usage_error(f"--session: {exc}")
    finally:
        store.close()
    started = events[0] if events else None
    if isinstance(started, ev.SessionStarted) and is_attached(started):
        return _attached_trees(events, sid, tree, before)
    if not isinstance(started, ev.SessionStarted) or started.mode != "imported":
        _usage_error(f"--session {session}: not an imported or attached Claude Code session "
                     "(portside import --claude-code FILE or portside attach makes one)")
    assert isinstance(started, ev.SessionStarted)
    if tree is None and before is None:
        tree = _recorded_folder(started, "project as the session left it (--tree DIR) or as "
                                "it was before (--before DIR)")
    home = Path(tempfile.mkdtemp(prefix=f"portside-verify-{sid[:20]}-"))
    try:
        ref, cand = prepare_trees(events, home, tree_after=tree, tree_before=before)
    except TreeError as exc:
        shutil.rmtree(home, ignore_errors=True)
        _usage_error(f"--session {sid}: {exc}")
    source = tree or before
    assert source is not None
    meta = verify_meta(events, source.resolve(), tree is not None)
    outside = meta.get("edits_outside_folder") or []
    if outside:  # shown, never written: the copies hold only the session's folder
        from portside.core.safety.terminal_text import clean_line

        click.echo("portside: not verified, outside the session's folder (never written): "
                   + ", ".join(clean_line(str(p)) for p in outside), err=True)
    return ImportedTrees(ref, cand, meta, imported_claim(events), home)


def _recorded_folder(started: Any, give: str) -> Path:
    recorded = Path(started.project)
    if not recorded.is_dir():
        _usage_error(f"--session {started.session_id}: its folder {started.project} is not "
                     f"here; give the {give}")
    return recorded


def _attached_trees(events: list[Any], sid: str, tree: Path | None, before: Path | None
                    ) -> ImportedTrees:
    """An attached session: the tree before as portside kept it (or ``before``), the tree
    after as it is now (``tree``, default the folder it ran in); the whole change is said."""
    from portside.core.claude_code.attached_trees import (
        attached_meta,
        change_lines,
        prepare_attached,
    )
    from portside.core.claude_code.trees import TreeError, imported_claim
    from portside.core.safety.terminal_text import clean_line

    after = (tree or _recorded_folder(events[0], "project as the session left it (--tree DIR)")
             ).resolve()
    home = Path(tempfile.mkdtemp(prefix=f"portside-verify-{sid[:20]}-"))
    try:
        trees = prepare_attached(events, home, after, before.resolve() if before else None)
    except TreeError as exc:
        shutil.rmtree(home, ignore_errors=True)
        _usage_error(f"--session {sid}: {exc}")
    lines = change_lines(trees.changes)
    click.echo(f"portside: the whole change since before the session ({trees.before_is}), "
               f"{len(lines)} file(s):", err=True)
    for line in lines:
        click.echo(f"  {clean_line(line)}", err=True)
    return ImportedTrees(trees.reference, trees.candidate, attached_meta(events, after, trees),
                         imported_claim(events), home)
