"""portside's hooks in a user's own Claude Code project: ``DIR/.claude/settings.local.json``.

What the user had there is kept byte for byte, with its mode, beside it
(``settings.local.json.portside``, or a note that there was none) before the hooks are merged
in. When ``attach`` ends the file is put back byte for byte, unless it changed meanwhile (Claude
Code's "don't ask again" adds permissions there): then the file as it is now, less portside's
hooks, is kept and the caller is told what differs. A backup found at start means an earlier
``attach`` died with its hooks in place: it is restored first, the same way, and said.

Only plain files inside DIR are read or written: a ``.claude``, settings file or backup that is
a symlink (or a backup not this user's) is refused, never followed. A file that is not a JSON
object cannot be merged into and so is refused, as is a folder where the backup cannot be
written: ``attach`` never runs when it could not undo itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shlex
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
#: How portside's own hook entries are told apart (also a killed attach's, in another folder).
MARK = "claude_code/hook_client.py"


class AttachError(Exception):
    """The project's settings cannot be changed and restored safely."""


@dataclass
class Installed:
    settings: Path
    backup: Path
    made_dir: bool  # .claude did not exist: removed again when empty
    recovered: str  # "" or what an earlier, killed attach had left and was restored


def hook_command(endpoint: str) -> str:
    """The command hook Claude Code runs: a stdlib client that sends its stdin over the
    channel in folder ``endpoint`` (no secret: the key is in the folder) and exits 2 (block)
    on PreToolUse whenever portside does not answer."""
    return (f"{shlex.quote(sys.executable)} -I {shlex.quote(str(CLIENT))} "
            f"{shlex.quote(endpoint)}")


def _hooks(endpoint: str) -> dict[str, list[dict[str, object]]]:
    entry = {"type": "command", "command": hook_command(endpoint), "timeout": HOOK_TIMEOUT_S}
    out: dict[str, list[dict[str, object]]] = {}
    for name, matcher in EVENTS.items():
        block: dict[str, object] = {"hooks": [dict(entry)]}
        if matcher is not None:
            block["matcher"] = matcher
        out[name] = [block]
    return out


def _plain(path: Path, what: str) -> None:
    """Refuse a symlink (or anything but a file) where portside reads or writes."""
    with contextlib.suppress(FileNotFoundError):
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            raise AttachError(f"{path}: {what} is a symlink (to {os.readlink(path)}); portside "
                              "writes only plain files inside the project: not attaching")
        if not stat.S_ISREG(st.st_mode):
            raise AttachError(f"{path}: {what} is not a plain file; not attaching")


def _folder(path: Path) -> None:
    """``.claude`` must be a real folder inside the project (or absent), never followed."""
    with contextlib.suppress(FileNotFoundError):
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            raise AttachError(f"{path}: .claude is a symlink (to {os.readlink(path)}); portside "
                              "writes only inside the project: not attaching")
        if not stat.S_ISDIR(st.st_mode):
            raise AttachError(f"{path}: not a folder; not attaching")


def _write(path: Path, data: bytes, mode: int) -> None:
    """``data`` at ``path`` with exactly ``mode``, atomically (a fresh temp name: a planted
    one is never followed)."""
    tmp = path.with_name(f"{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)  # not the umask's
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _ours(block: Any) -> bool:
    hooks = block.get("hooks") if isinstance(block, dict) else None
    return isinstance(hooks, list) and bool(hooks) and all(isinstance(h, dict) and MARK in str(h.get("command", ""))
                               for h in hooks)


def _without_ours(now: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    """The settings as they are now, less portside's hook entries (and the empty lists and
    ``hooks`` object that held only them)."""
    hooks = now.get("hooks")
    if not isinstance(hooks, dict):
        return now
    had = before.get("hooks")
    had = had if isinstance(had, dict) else {}
    kept: dict[str, Any] = {}
    for name, blocks in hooks.items():
        if isinstance(blocks, list):
            blocks = [b for b in blocks if not _ours(b)]
            if not blocks and name not in had:
                continue
        kept[name] = blocks
    out = dict(now)
    if kept or "hooks" in before:
        out["hooks"] = kept
    else:
        del out["hooks"]
    return out


def restore(project: Path) -> str:
    """Put back what a backup holds (an earlier attach's), keeping what changed meanwhile;
    what was done, or "" when there was no backup."""
    return _restore(project)[0]


def _restore(project: Path) -> tuple[str, bool]:
    """(what was done, whether changes made meanwhile were kept)."""
    settings = project / SETTINGS
    backup = settings.with_name(settings.name + BACKUP_SUFFIX)
    _folder(settings.parent)
    try:
        fd = os.open(backup, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return "", False
    except OSError as exc:  # ELOOP: a symlink, never followed
        raise AttachError(f"{backup}: not restored: not a plain file ({exc}); look at it, "
                          "move it away, then attach again") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise AttachError(f"{backup}: not restored: not a plain file of this user's; "
                              "look at it, move it away, then attach again")
        data = f.read()
    mode = stat.S_IMODE(st.st_mode)
    _plain(settings, "the settings file")
    try:
        before: dict[str, Any] = {} if data == ABSENT else json.loads(data)
        now = json.loads(settings.read_bytes()) if settings.exists() else None
        kept = _without_ours(now, before) if isinstance(now, dict) else None
    except (ValueError, OSError):
        kept = None  # what is there now is not mergeable: the backup's bytes win, said
        now = "unreadable"
    if kept is None or kept == before:
        if data == ABSENT:
            settings.unlink(missing_ok=True)
        else:
            _write(settings, data, mode)
        said = f"restored {settings} from {backup.name}"
        if now == "unreadable":
            said += " (the file as it was then was not JSON and is replaced)"
    else:
        _write(settings, (json.dumps(kept, indent=2) + "\n").encode(), mode)
        changed = sorted(k for k in set(kept) | set(before) if kept.get(k) != before.get(k))
        said = (f"{settings}: portside's hooks removed; what changed there during the attach "
                f"is kept ({', '.join(changed)}), so the file is not byte for byte as before")
    backup.unlink()
    return said, kept is not None and kept != before


def install(project: Path, endpoint: str) -> Installed:
    """Merge portside's hooks (each naming ``endpoint``, the channel folder) into the
    project's settings.local.json, its old bytes and mode kept."""
    project = Path(os.path.realpath(project))
    if not project.is_dir():
        raise AttachError(f"{project}: not a directory")
    try:
        recovered = restore(project)
    except OSError as exc:
        raise AttachError(f"{project / SETTINGS}: an earlier attach left hooks there and they "
                          f"cannot be removed ({exc}); not attaching") from None
    folder = project / SETTINGS.parent
    _folder(folder)
    made_dir = not folder.exists()
    settings = project / SETTINGS
    backup = settings.with_name(settings.name + BACKUP_SUFFIX)
    _plain(settings, "the settings file")
    try:
        old = settings.read_bytes() if settings.exists() else None
        mode = stat.S_IMODE(settings.stat().st_mode) if old is not None else 0o644
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
    for name, blocks in _hooks(endpoint).items():
        theirs = merged.get(name) or []
        if not isinstance(theirs, list):
            raise AttachError(f"{settings}: field 'hooks.{name}' is not a list")
        merged[name] = [*blocks, *theirs]  # portside's first: its deny stands whatever follows
    new = {**current, "hooks": merged}
    try:
        folder.mkdir(exist_ok=True)
        # The way back exists before anything is changed, as private as the original was.
        _write(backup, old if old is not None else ABSENT, mode if old is not None else 0o600)
        _write(settings, (json.dumps(new, indent=2) + "\n").encode(), mode)
    except OSError as exc:
        raise AttachError(f"{settings}: cannot be changed and restored ({exc}); "
                          "not attaching") from None
    return Installed(settings, backup, made_dir, recovered)


def uninstall(inst: Installed) -> str:
    """What the user had, back (and what changed meanwhile, kept); .claude removed when
    portside made it and it is empty. What was kept that is not byte for byte theirs, or ""."""
    said, merged = _restore(inst.settings.parent.parent)
    if inst.made_dir:
        # Not removed when the user (or Claude Code) put something there: theirs.
        with contextlib.suppress(OSError):
            inst.settings.parent.rmdir()
    return said if merged else ""
