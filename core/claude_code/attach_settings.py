"""portside's hooks in a user's own Claude Code project: ``DIR/.claude/settings.local.json``.

What the user had there is kept byte for byte beside it (``settings.local.json.portside``, or a
note that there was none) before the hooks are merged in, and put back when ``attach`` ends.
A backup found at start means an earlier ``attach`` died with its hooks in place: it is
restored first. A file that is not a JSON object cannot be merged into and so is refused, as is
a folder where the backup cannot be written: ``attach`` never runs when it could not undo itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

SETTINGS = Path(".claude") / "settings.local.json"
BACKUP_SUFFIX = ".portside"
#: Written into the backup when the user had no settings file (restoring removes ours).
ABSENT = b"portside: no settings.local.json before attach\n"
#: The hook events portside answers, and the matcher each is registered with.
EVENTS = {"PreToolUse": "*", "PostToolUse": "*", "Stop": None, "SessionStart": None,
          "SessionEnd": None}
#: Claude Code waits this long for a hook; the reviewer may take long, and at timeout the
#: client is killed, which lets the tool run: the client answers well before (its own limit).
HOOK_TIMEOUT_S = 24 * 3600
CLIENT = Path(__file__).with_name("hook_client.py")


class AttachError(Exception):
    """The project's settings cannot be changed and restored safely."""


@dataclass
class Installed:
    settings: Path
    backup: Path
    made_dir: bool  # .claude did not exist: removed again when empty
    recovered: str  # "" or what an earlier, killed attach had left and was restored


def hook_command(url: str) -> str:
    """The command hook Claude Code runs: a stdlib client that posts its stdin to ``url`` and
    exits 2 (block) on PreToolUse whenever portside does not answer."""
    return f"{shlex.quote(sys.executable)} -I {shlex.quote(str(CLIENT))} {shlex.quote(url)}"


def _hooks(url: str) -> dict[str, list[dict[str, object]]]:
    entry = {"type": "command", "command": hook_command(url), "timeout": HOOK_TIMEOUT_S}
    out: dict[str, list[dict[str, object]]] = {}
    for name, matcher in EVENTS.items():
        block: dict[str, object] = {"hooks": [dict(entry)]}
        if matcher is not None:
            block["matcher"] = matcher
        out[name] = [block]
    return out


def restore(project: Path) -> str:
    """Put back what a backup holds (an earlier attach's); "" when there was none."""
    settings = project / SETTINGS
    backup = settings.with_name(settings.name + BACKUP_SUFFIX)
    if not backup.exists():
        return ""
    data = backup.read_bytes()
    if data == ABSENT:
        settings.unlink(missing_ok=True)
    else:
        tmp = settings.with_name(settings.name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, settings)
    backup.unlink()
    return f"restored {settings} from {backup.name}"


def install(project: Path, url: str) -> Installed:
    """Merge portside's hooks into the project's settings.local.json, its old bytes kept."""
    project = Path(os.path.realpath(project))
    if not project.is_dir():
        raise AttachError(f"{project}: not a directory")
    try:
        recovered = restore(project)
    except OSError as exc:
        raise AttachError(f"{project / SETTINGS}: an earlier attach left hooks there and they "
                          f"cannot be removed ({exc}); not attaching") from None
    folder = project / SETTINGS.parent
    made_dir = not folder.exists()
    settings = project / SETTINGS
    backup = settings.with_name(settings.name + BACKUP_SUFFIX)
    try:
        old = settings.read_bytes() if settings.exists() else None
    except OSError as exc:
        raise AttachError(f"{settings}: cannot read ({exc})") from None
    current: dict[str, object] = {}
    if old is not None and old.strip():
        try:
            loaded = json.loads(old)
        except ValueError as exc:
            raise AttachError(f"{settings}:{getattr(exc, 'lineno', 1)}: not JSON ({exc}); "
                              "fix or move it, then attach again") from None
        if not isinstance(loaded, dict):
            raise AttachError(f"{settings}:1: not a JSON object; fix or move it")
        current = loaded
    hooks = current.get("hooks") or {}
    if not isinstance(hooks, dict):
        raise AttachError(f"{settings}: field 'hooks' is not an object; fix it, then attach")
    merged = dict(hooks)
    for name, blocks in _hooks(url).items():
        theirs = merged.get(name) or []
        if not isinstance(theirs, list):
            raise AttachError(f"{settings}: field 'hooks.{name}' is not a list")
        merged[name] = [*blocks, *theirs]  # portside's first: its deny stands whatever follows
    new = {**current, "hooks": merged}
    try:
        folder.mkdir(exist_ok=True)
        tmp = backup.with_name(backup.name + ".tmp")
        tmp.write_bytes(old if old is not None else ABSENT)
        os.replace(tmp, backup)  # the way back exists before anything is changed
        tmp = settings.with_name(settings.name + ".tmp")
        tmp.write_text(json.dumps(new, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, settings)
    except OSError as exc:
        raise AttachError(f"{settings}: cannot be changed and restored ({exc}); "
                          "not attaching") from None
    return Installed(settings, backup, made_dir, recovered)


def uninstall(inst: Installed) -> None:
    """What the user had, back; .claude removed when portside made it and it is empty."""
    restore(inst.settings.parent.parent)
    if inst.made_dir:
        # Not removed when the user (or Claude Code) put something there: theirs.
        with contextlib.suppress(OSError):
            inst.settings.parent.rmdir()
