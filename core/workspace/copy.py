"""The agent's sandbox: a per-session working copy of the user's project.

Every file the agent touches goes through :class:`Workspace`. Paths are confined to the
workspace root (no ``..``, absolute paths, ``~``, NUL bytes, symlinks leading out, special
files, ``.git`` internals or portside's own metadata). Edits are proposed as exact-string
replacements or whole-file writes, reviewed as unified diffs, applied only while the file still
holds the text they were proposed against, and can be reverted the same way. The user's
original tree is never written, except by :meth:`Workspace.write_back`, which only runs when
asked for explicitly.

Layout on disk (``home`` is one directory per workspace)::

    home/workspace.json        metadata; written last, so its presence marks a complete workspace
    home/baseline/manifest.json  what the project looked like when the workspace was created
    home/baseline/blobs/<sha>  contents of baseline files (small ones), for diffs
    home/tree/                 the working copy (with a private git repo of its own, or plain)

The metadata lives beside the tree, not inside it, so neither the agent nor the training runs
(whose working directory is the tree) trip over it.
"""

from __future__ import annotations

import contextlib
import difflib
import errno
import fnmatch
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

__all__ = [
    "Change",
    "Edit",
    "GrepHit",
    "GrepHits",
    "Listing",
    "Workspace",
    "WorkspaceError",
    "display_path",
    "real_path",
]

#: Directory names never copied into a workspace nor listed, diffed or patched: VCS data,
#: environments and caches that are large, machine-specific and rebuilt on demand.
SKIP_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".portside",
        "__pycache__",
        ".venv",
        "venv",
        ".tox",
        ".nox",
        "node_modules",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".ipynb_checkpoints",
        "wandb",
        "mlruns",
        "lightning_logs",
    }
)
#: Names the agent may never address, at any depth (``.portside`` is reserved for metadata).
RESERVED_NAMES = frozenset({".git", ".portside"})
#: Files that look like secrets (matched on the file name, case-insensitively), left out of
#: the agent's workspace and the reference copy unless the user opts in (``--with-secrets``):
#: what is copied reaches the agent, the model and the log, and the runs.
SECRET_FILES = (
    ".env", ".env.*", "*.env", ".envrc", ".netrc", "_netrc", ".pgpass", ".pypirc", ".npmrc",
    ".git-credentials", ".htpasswd", ".dockercfg", "credentials", "credentials.json",
    "*credentials*.json", "client_secret*.json", "service-account*.json", "*service_account*.json",
    "kaggle.json", "secrets.*", ".secrets", "*.secret", "*.pem", "*.key", "*.p12", "*.pfx",
    "*.jks", "*.keystore", "*.ppk", "*.tfvars", "id_rsa", "id_dsa", "id_ecdsa", "id_ed25519",
    ".s3cfg", ".vault-token", ".boto", ".databrickscfg", "hf_token.txt", "*wandb*key*",
)
#: Paths (their last components) that are credentials although the name alone is not.
SECRET_PATHS = ("huggingface/token",)
#: Templates that hold no secret by convention, copied even though they match above.
SECRET_TEMPLATES = (".env.example", ".env.sample", ".env.template", ".env.dist")
#: Directories of credentials, left out whole.
SECRET_DIRS = frozenset({".ssh", ".aws", ".gnupg", ".azure", ".kube", ".docker"})

MAX_PATH_CHARS = 1024
MAX_COMPONENT_BYTES = 255  # NAME_MAX on Linux and macOS
MAX_READ_BYTES = 2 * 1024 * 1024
#: Baseline files up to this size keep their contents (for diffs); larger ones only a hash.
BLOB_LIMIT = 4 * 1024 * 1024
META_FILE = "workspace.json"
META_VERSION = 1

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_DIR_NOFOLLOW = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _O_CLOEXEC


class WorkspaceError(Exception):
    """A refused path or edit, or a workspace that cannot be created/opened; the message is
    meant to be shown to the agent or the reviewer as is (a name's non-UTF-8 bytes escaped,
    so it can be stored)."""

    def __init__(self, message: str = "") -> None:
        super().__init__(_SURROGATE.sub(_escape_byte, message))


# --------------------------------------------------------------------------- names
# A file name is any bytes but "/" and NUL; Python holds a non-UTF-8 byte as a lone surrogate
# (os.fsdecode), which no UTF-8 text (an event, JSON, the terminal) can carry. Every path the
# workspace hands out is shown with such a byte as \xHH and a backslash as \\; every path it is
# given is read back the same way, so a shown name round-trips to the same file.

_SURROGATE = re.compile("[\udc80-\udcff]")
_ESCAPED = re.compile(r"\\(\\|x[89a-fA-F][0-9a-fA-F])?")


def _escape_byte(m: re.Match[str]) -> str:
    return f"\\x{ord(m.group()) - 0xDC00:02x}"


def display_path(name: str) -> str:
    """``name`` as UTF-8 text that says its bytes (see :func:`real_path`)."""
    if "\\" not in name and not _SURROGATE.search(name):
        return name
    return _SURROGATE.sub(_escape_byte, name.replace("\\", "\\\\"))


def real_path(shown: str) -> str:
    """The name :func:`display_path` showed as ``shown``. Any other backslash is refused: it is
    usually a Windows separator."""
    if "\\" not in shown:
        return shown

    def back(m: re.Match[str]) -> str:
        code = m.group(1)
        if code is None:
            head = shown if len(shown) <= 80 else shown[:77] + "..."
            raise WorkspaceError(f"refused path {head!r}: backslashes are not allowed; use '/'"
                                 " (a name's own backslash is \\\\, a byte that is not UTF-8 "
                                 "\\xHH)")
        return "\\" if code == "\\" else chr(0xDC00 + int(code[1:], 16))

    return _ESCAPED.sub(back, shown)


# --------------------------------------------------------------------------- edits


@dataclass(frozen=True)
class Edit:
    """A proposed change to one file. ``before`` is the file's text when the edit was proposed
    ("" for a new file, with ``new_file`` set); ``after`` is its text once applied."""

    edit_id: str
    path: str
    before: str
    after: str
    new_file: bool = False

    def unified_diff(self, context: int = 3) -> str:
        real = real_path(self.path)
        old = "/dev/null" if self.new_file else _quote_path("a/" + real)
        return "".join(
            _diff_lines(self.before, self.after, old, _quote_path("b/" + real), context)
        )

    def stats(self) -> tuple[int, int]:
        """(lines added, lines removed), counted from the same diff the reviewer sees."""
        body = _diff_lines(self.before, self.after, "a", "b", 0)[2:]
        return (
            sum(1 for ln in body if ln.startswith("+")),
            sum(1 for ln in body if ln.startswith("-")),
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Edit:
        return cls(
            edit_id=str(data["edit_id"]),
            path=str(data["path"]),
            before=str(data["before"]),
            after=str(data["after"]),
            new_file=bool(data.get("new_file", False)),
        )


@dataclass(frozen=True)
class GrepHit:
    path: str
    line: int  # 1-based
    text: str


@dataclass(frozen=True)
class Change:
    """One path that differs between the workspace and its baseline."""

    path: str
    status: str  # "added" | "modified" | "deleted"
    patchable: bool  # False: binary, too large, or a symlink; left out of the patch
    reason: str = ""


class Listing(list[str]):
    """A list of workspace paths; ``truncated`` says the limit cut it short."""

    truncated: bool = False


class GrepHits(list[GrepHit]):
    truncated: bool = False


# --------------------------------------------------------------------------- text helpers


def _split_lines(text: str) -> list[str]:
    # Only "\n" ends a line (as in git); str.splitlines would also split on \f, \u2028, ...
    if not text:
        return []
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _diff_lines(before: str, after: str, fromfile: str, tofile: str, context: int) -> list[str]:
    out: list[str] = []
    for line in difflib.unified_diff(
        _split_lines(before), _split_lines(after), fromfile, tofile, n=context
    ):
        if line.endswith("\n"):
            out.append(line)
        else:
            out.append(line + "\n")
            out.append("\\ No newline at end of file\n")
    return out


_QUOTE_ESCAPES = {
    7: "\\a",
    8: "\\b",
    9: "\\t",
    10: "\\n",
    11: "\\v",
    12: "\\f",
    13: "\\r",
    34: '\\"',
    92: "\\\\",
}


def _quote_path(name: str) -> str:
    """Quote a path the way git does in patch headers (C-style, octal for non-ASCII)."""
    raw = name.encode("utf-8", "surrogateescape")
    if all(32 <= c < 127 and c not in (34, 92) for c in raw):
        return name
    body = "".join(
        _QUOTE_ESCAPES.get(c) or (chr(c) if 32 <= c < 127 else f"\\{c:03o}") for c in raw
    )
    return f'"{body}"'


def _decode(data: bytes) -> str | None:
    """Text, or None when the bytes look binary (NUL byte, or not UTF-8)."""
    if b"\x00" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """Translate a glob to a regex over relative POSIX paths: ``*`` and ``?`` stay within a
    component, ``**`` crosses directories, ``[...]`` is a character class."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        if pattern.startswith("**/", i):
            out.append("(?:[^/]*/)*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and (end := pattern.find("]", i + 2)) != -1:
            body = pattern[i + 1 : end]
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    try:
        return re.compile("".join(out) + r"\Z")
    except re.error as exc:
        raise WorkspaceError(f"bad glob {pattern!r}: {exc}") from None


# --------------------------------------------------------------------------- confinement


def _check_rel(rel: object) -> list[str]:
    """Lexical checks; returns the path's components. Refuses before touching the disk."""
    if not isinstance(rel, str):
        raise WorkspaceError(f"path must be a string, got {type(rel).__name__}")
    shown = rel if len(rel) <= 80 else rel[:77] + "..."
    if "\x00" in rel:
        raise WorkspaceError(f"refused path {shown!r}: it contains a NUL byte")
    if not rel.strip():
        raise WorkspaceError("refused path: it is empty")
    if len(rel) > MAX_PATH_CHARS:
        raise WorkspaceError(
            f"refused path {shown!r}: {len(rel)} characters is longer than the {MAX_PATH_CHARS} allowed"
        )
    try:
        rel.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raise WorkspaceError(f"refused path {shown!r}: it holds a lone surrogate that no file "
                             "name has") from None
    if rel.startswith("/") or re.match(r"[A-Za-z]:", rel):
        raise WorkspaceError(
            f"refused path {shown!r}: absolute paths are not allowed; give a path relative to the project root"
        )
    if rel.startswith("~"):
        raise WorkspaceError(f"refused path {shown!r}: '~' (home directory) is not allowed")
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    for part in parts:
        if part == "..":
            raise WorkspaceError(f"refused path {shown!r}: '..' components are not allowed")
        if len(part.encode("utf-8", "surrogateescape")) > MAX_COMPONENT_BYTES:
            raise WorkspaceError(
                f"refused path {shown!r}: a component is longer than {MAX_COMPONENT_BYTES} bytes"
            )
        if part in RESERVED_NAMES:
            raise WorkspaceError(f"refused path {shown!r}: {part} is off limits")
    return parts


def _confine(root: str, rel: str) -> tuple[str, list[str]]:
    """Resolve ``rel`` under ``root`` (a realpath). Returns the real path and its components
    relative to root; raises WorkspaceError when it leaves root or names a special file."""
    parts = _check_rel(rel)
    real = os.path.realpath(os.path.join(root, *parts))
    if os.path.commonpath([root, real]) != root:
        raise WorkspaceError(
            f"refused path {rel!r}: it resolves to {real}, outside the workspace (through a symlink)"
        )
    inner = [] if real == root else os.path.relpath(real, root).split(os.sep)
    for part in inner:
        if part in RESERVED_NAMES:
            raise WorkspaceError(
                f"refused path {rel!r}: it resolves into {part}, which is off limits"
            )
    try:
        st = os.lstat(real)
    except FileNotFoundError:
        return real, inner
    except OSError as exc:
        raise WorkspaceError(f"refused path {rel!r}: {exc.strerror}") from None
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        raise WorkspaceError(
            f"refused path {rel!r}: it is a {_kind(st.st_mode)}, not a regular file or directory"
        )
    return real, inner


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "fifo"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISLNK, "symlink"),
        (stat.S_ISDIR, "directory"),
    ):
        if test(mode):
            return name
    return "special file"


def _open_dir(root: str, parts: list[str], rel: str, create: bool = False) -> int:
    """Walk ``parts`` from ``root`` one directory at a time with O_NOFOLLOW, so a component
    swapped for a symlink after resolution fails instead of being followed."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | _O_CLOEXEC)
    try:
        for name in parts:
            try:
                nfd = os.open(name, _O_DIR_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                os.mkdir(name, 0o755, dir_fd=fd)
                nfd = os.open(name, _O_DIR_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nfd
    except OSError as exc:
        os.close(fd)
        if isinstance(exc, FileNotFoundError):
            raise
        raise WorkspaceError(
            f"refused path {rel!r}: a directory on the way is a symlink or not a directory "
            f"({exc.strerror}); it may have changed while being opened"
        ) from None
    return fd


def _read_at(root: str, parts: list[str], rel: str, limit: int | None) -> bytes | None:
    """Contents of a confined regular file, or None if it does not exist."""
    if not parts:
        raise WorkspaceError(f"{rel!r} is the workspace root, not a file")
    try:
        dfd = _open_dir(root, parts[:-1], rel)
    except FileNotFoundError:
        return None
    try:
        fd = os.open(
            parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _O_CLOEXEC, dir_fd=dfd
        )
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):
            raise WorkspaceError(
                f"refused path {rel!r}: it became a symlink while being opened"
            ) from None
        raise WorkspaceError(f"cannot read {rel}: {exc.strerror}") from None
    finally:
        os.close(dfd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        if stat.S_ISDIR(st.st_mode):
            raise WorkspaceError(f"{rel} is a directory, not a file")
        raise WorkspaceError(f"refused path {rel!r}: it is a {_kind(st.st_mode)}")
    with os.fdopen(fd, "rb") as fh:
        if limit is not None and st.st_size > limit:
            raise WorkspaceError(
                f"{rel} is {st.st_size} bytes, more than the {limit} bytes that can be read; "
                "read a line range or grep it instead"
            )
        return fh.read()


def _write_at(root: str, parts: list[str], rel: str, data: bytes, mode: int | None = None) -> None:
    """Replace a confined file atomically (temp file + rename in the same directory). The
    rename never writes through a symlink or a hard link to another inode."""
    if not parts:
        raise WorkspaceError(f"{rel!r} is the workspace root, not a file")
    dfd = _open_dir(root, parts[:-1], rel, create=True)
    tmp = f".portside-tmp-{uuid.uuid4().hex}"
    try:
        name = parts[-1]
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise WorkspaceError(f"cannot write {rel}: it is a {_kind(st.st_mode)}")
        if mode is None:
            mode = stat.S_IMODE(st.st_mode) if st is not None else 0o644
        fd = os.open(
            tmp,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _O_CLOEXEC,
            0o600,
            dir_fd=dfd,
        )
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                os.fchmod(fh.fileno(), mode)
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            raise
    except OSError as exc:
        raise WorkspaceError(f"cannot write {rel}: {exc.strerror}") from None
    finally:
        os.close(dfd)


def _unlink_at(root: str, parts: list[str], rel: str) -> None:
    if not parts:
        raise WorkspaceError(f"{rel!r} is the workspace root, not a file")
    try:
        dfd = _open_dir(root, parts[:-1], rel)
    except FileNotFoundError:
        return
    try:
        st = os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode):
            raise WorkspaceError(f"cannot delete {rel}: it is a {_kind(st.st_mode)}")
        os.unlink(parts[-1], dir_fd=dfd)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise WorkspaceError(f"cannot delete {rel}: {exc.strerror}") from None
    finally:
        os.close(dfd)


def confined_parts(root: Path | str, rel: str) -> list[str]:
    """The components of ``rel`` once resolved under ``root``: WorkspaceError when it is
    absolute, has ``..``, names ``.git``, or leads out of ``root`` through a symlink. For
    trees that are not workspaces (the copies an imported session is verified in)."""
    return _confine(os.path.realpath(root), rel)[1]


def read_confined(root: Path | str, rel: str) -> bytes | None:
    """A file's bytes under ``root`` (None when missing), never through a symlink out."""
    real = os.path.realpath(root)
    return _read_at(real, _confine(real, rel)[1], rel, None)


def write_confined(root: Path | str, rel: str, data: bytes) -> None:
    """Replace (or create) a file under ``root``; no directory on the way may be a symlink."""
    real = os.path.realpath(root)
    _write_at(real, _confine(real, rel)[1], rel, data)


def unlink_confined(root: Path | str, rel: str) -> None:
    real = os.path.realpath(root)
    _unlink_at(real, _confine(real, rel)[1], rel)


# --------------------------------------------------------------------------- git and copies


def _git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    # Never take locks or rewrite the index of the user's repo just to look at it.
    env.update(GIT_OPTIONAL_LOCKS="0", GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    return env


#: Settings that make git run a program, off on every call portside makes (command-line config
#: outranks every file's): none of a repository's hooks, monitors, pagers, helpers or transports
#: ever runs on portside's behalf. Filters and textconv need a driver defined in a config: the
#: workspace's config is put back to :data:`_WORKSPACE_GIT_CONFIG` before each call instead.
_GIT_SAFE = (
    "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "core.pager=cat",
    "-c", "credential.helper=", "-c", "protocol.allow=never", "-c", "core.askPass=",
    "-c", "commit.gpgsign=false", "-c", "core.untrackedCache=false", "--no-pager",
)
#: The whole config of a workspace's private repository (what ``git init`` writes). A run in
#: the tree can rewrite .git/config (an fsmonitor, a filter, an include); portside's calls
#: there read this instead.
_WORKSPACE_GIT_CONFIG = (
    b"[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n"
    b"\tlogallrefupdates = true\n"
)


def _git(cwd: Path | str, *args: str, check: bool = True, stdin: bytes | None = None
         ) -> subprocess.CompletedProcess[bytes]:
    cmd = ["git", *_GIT_SAFE, "-C", str(cwd), *args]
    try:
        proc = subprocess.run(cmd, env=_git_env(), capture_output=True, timeout=300, input=stdin)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise WorkspaceError(f"git {' '.join(args)} failed: {exc}") from None
    if check and proc.returncode != 0:
        msg = proc.stderr.decode("utf-8", "replace").strip()
        raise WorkspaceError(f"git {' '.join(args)} failed: {msg}")
    return proc


def _own_git_dir(tree: Path) -> list[str]:
    """The arguments that make git use the workspace's own repository and nothing a run made
    of it: ``.git`` must still be a directory (not a gitfile or a link to the run's own repo),
    its config is put back to portside's and a ``commondir`` (another repo's config) removed.
    Explicit ``--git-dir``, so a ``.git`` the run made in a subfolder is never discovered."""
    git_dir = tree / ".git"
    try:
        st = os.lstat(git_dir)
    except OSError as exc:
        raise WorkspaceError(f"the workspace's {git_dir} is gone ({exc.strerror}): its "
                             "changes cannot be listed through git") from None
    if not stat.S_ISDIR(st.st_mode):
        raise WorkspaceError(f"the workspace's {git_dir} was replaced by a {_kind(st.st_mode)}"
                             " (a run made it): portside does not follow it")
    root = str(tree)
    try:
        config = _read_at(root, [".git", "config"], ".git/config", None)
    except WorkspaceError:
        config = None  # a link or a special file: replaced below
    if config != _WORKSPACE_GIT_CONFIG:
        _write_at(root, [".git", "config"], ".git/config", _WORKSPACE_GIT_CONFIG, 0o644)
    for extra in ("commondir", "config.worktree"):
        with contextlib.suppress(WorkspaceError):
            _unlink_at(root, [".git", extra], f".git/{extra}")
    return [f"--git-dir={git_dir}", f"--work-tree={tree}"]


def git_repo(project: Path) -> tuple[Path, str, str] | None:
    """(toplevel, prefix, HEAD commit) when ``project`` belongs to a git repo with a commit
    and has tracked files; None otherwise (then a plain copy is made)."""
    try:
        top = _git(project, "rev-parse", "--show-toplevel", check=False)
        head = _git(project, "rev-parse", "--verify", "-q", "HEAD^{commit}", check=False)
    except WorkspaceError:
        return None
    if top.returncode or head.returncode:
        return None
    toplevel = Path(os.path.realpath(top.stdout.decode().strip()))
    prefix = os.path.relpath(project, toplevel)
    if prefix.startswith(".."):
        return None
    tracked = _git(project, "ls-files", "-z", "--cached", check=False)
    if tracked.returncode or not tracked.stdout:
        return None  # e.g. an untracked folder inside a home-directory dotfiles repo
    return toplevel, "" if prefix == "." else prefix, head.stdout.decode().strip()


def _skipped(parts: Iterable[str], exclude: frozenset[str]) -> bool:
    return any(p in SKIP_DIRS or p in exclude for p in parts)


def is_secret(rel: str) -> bool:
    """Does this project path look like a secret (see :data:`SECRET_FILES`)?"""
    parts = rel.split("/")
    if any(p in SECRET_DIRS for p in parts[:-1]):
        return True
    name = parts[-1].lower()
    if name in SECRET_TEMPLATES:
        return False
    low = "/" + rel.lower()
    if any(low.endswith("/" + p) or low.endswith("/." + p) for p in SECRET_PATHS):
        return True  # .huggingface/token, .cache/huggingface/token
    return any(fnmatch.fnmatchcase(name, pat) for pat in SECRET_FILES)


def _copyable(project: Path, use_git: bool, exclude: frozenset[str], secrets: bool
              ) -> tuple[list[str], list[str]]:
    """(files to copy, secret-looking files withheld)."""
    files = _visible_files(project, use_git, exclude)
    if secrets:
        return files, []
    withheld = [f for f in files if is_secret(f)]
    return [f for f in files if not is_secret(f)], withheld


def _visible_files(tree: Path, use_git: bool, exclude: frozenset[str],
                   repo: Path | None = None) -> list[str]:
    """Relative POSIX paths of the regular files and symlinks a user would call "the
    project": for git, tracked plus untracked-but-not-ignored; otherwise everything.
    ``repo``: the workspace's tree, whose .git a run could have written (:func:`_own_git_dir`)."""
    found: list[str] = []
    if use_git:
        own = _own_git_dir(repo) if repo is not None else []
        proc = _git(tree, *own, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
        names = sorted({n for n in proc.stdout.decode("utf-8", "surrogateescape").split("\0") if n})
        for name in names:
            if _skipped(name.split("/"), exclude):
                continue
            try:
                st = os.lstat(tree / name)
            except OSError:
                continue  # tracked but deleted
            if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
                found.append(name)
        return found
    for dirpath, dirs, files in os.walk(tree):
        rel_dir = os.path.relpath(dirpath, tree)
        prefix = "" if rel_dir == "." else rel_dir.replace(os.sep, "/") + "/"
        keep = []
        for d in sorted(dirs):
            if d in SKIP_DIRS or d in exclude:
                continue
            if os.path.islink(os.path.join(dirpath, d)):
                found.append(prefix + d)  # a symlink to a directory is an entry, not walked
            else:
                keep.append(d)
        dirs[:] = keep
        for f in sorted(files):
            if f in exclude:
                continue
            try:
                st = os.lstat(os.path.join(dirpath, f))
            except OSError:
                continue  # removed while walking
            if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
                found.append(prefix + f)
    return sorted(found)


def _link_target(src_root: Path, src: Path) -> str:
    """A symlink's target for the copy: relative links that leave the project are made
    absolute, so they still point where they pointed for the user."""
    target = os.readlink(src)
    if os.path.isabs(target):
        return target
    resolved = os.path.normpath(os.path.join(os.path.dirname(src), target))
    if os.path.commonpath([str(src_root), resolved]) != str(src_root):
        return resolved
    return target


def _copy_entry(src_root: Path, dst_root: Path, rel: str) -> None:
    src, dst = src_root / rel, dst_root / rel
    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.is_symlink() or dst.is_file():
        dst.unlink()
    if src.is_symlink():
        os.symlink(_link_target(src_root, src), dst)
    else:
        shutil.copy2(src, dst, follow_symlinks=False)


def _copy_tree(src: Path, dst: Path, files: Iterable[str]) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for rel in files:
        _copy_entry(src, dst, rel)


def _private_repo(tree: Path, toplevel: Path, prefix: str, files: list[str]) -> None:
    """A fresh git repository in ``tree`` whose index holds the copied files: git's view of
    the workspace (ignored run outputs, ``git diff``) matches the user's, and nothing in it
    points at the user's .git (no shared config, objects, hooks or worktree registration)."""
    _git(tree, "init", "-q")
    (tree / ".git" / "config").write_bytes(_WORKSPACE_GIT_CONFIG)  # no template's settings
    # The ignore rules above the project and the repo's own exclude file still apply.
    parts = prefix.split("/") if prefix else []
    for i in range(len(parts)):
        src = toplevel.joinpath(*parts[:i], ".gitignore")
        if src.is_file() and not src.is_symlink():
            dst = tree.joinpath(*parts[:i], ".gitignore")
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
    proc = _git(toplevel, "rev-parse", "--git-path", "info/exclude", check=False)
    exclude = Path(toplevel, proc.stdout.decode("utf-8", "surrogateescape").strip())
    if proc.returncode == 0 and exclude.is_file():
        (tree / ".git" / "info").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(exclude, tree / ".git" / "info" / "exclude")
    names = [f"{prefix}/{f}" if prefix else f for f in files]
    if names:
        _git(tree, "add", "-f", "--pathspec-from-file=-", "--pathspec-file-nul",
             stdin="\0".join(names).encode("utf-8", "surrogateescape"))
    # A commit, so HEAD exists (scripts that log `git rev-parse HEAD`; `git diff HEAD`).
    _git(tree, "-c", "user.name=portside", "-c", "user.email=portside@localhost",
         "-c", "commit.gpgsign=false", "commit", "-q", "--no-verify", "--allow-empty",
         "-m", "portside: the project as the user sees it", check=False)


def _file_sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _git_mode(st_mode: int) -> str:
    return "100755" if st_mode & 0o111 else "100644"


def _entry(tree: Path, rel: str, known: dict[str, Any] | None = None) -> dict[str, Any] | None:
    path = tree / rel
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return {"kind": "link", "target": os.readlink(path)}
    if not stat.S_ISREG(st.st_mode):
        return None
    # Large files (datasets, checkpoints) are re-hashed only when size or mtime moved.
    if (
        known is not None
        and known.get("kind") == "file"
        and st.st_size > BLOB_LIMIT
        and known.get("size") == st.st_size
        and known.get("mtime_ns") == st.st_mtime_ns
    ):
        sha = known["sha"]
    else:
        sha = _file_sha(path)
    return {
        "kind": "file",
        "sha": sha,
        "mode": _git_mode(st.st_mode),
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
    }


def _same(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    if a is None or b is None:
        return a is b
    if a["kind"] != b["kind"]:
        return False
    if a["kind"] == "link":
        return a["target"] == b["target"]
    return a["sha"] == b["sha"] and a["mode"] == b["mode"]


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)


def _rmtree(path: Path) -> None:
    if path.is_symlink():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


def _inside(child: Path, parent: Path) -> bool:
    c, p = os.path.realpath(child), os.path.realpath(parent)
    return os.path.commonpath([c, p]) == p


# --------------------------------------------------------------------------- the workspace


class Workspace:
    """A confined working copy. Create with :meth:`create`, reattach with :meth:`open`."""

    def __init__(self, home: Path, meta: dict[str, Any]) -> None:
        self.home = Path(os.path.abspath(home))
        self.meta = meta
        self.tree = home / "tree"
        self.root = Path(os.path.realpath(self.tree / meta.get("prefix", "")))
        self._root = str(self.root)
        self.exclude = frozenset(meta.get("exclude", ()))
        self.max_read_bytes = MAX_READ_BYTES
        self._manifest: dict[str, dict[str, Any]] | None = None

    # ---- lifecycle

    @property
    def project(self) -> Path:
        return Path(self.meta["project"])

    @property
    def mode(self) -> str:
        """Either "git" (a copy with a private git repo) or "copy"."""
        return str(self.meta["mode"])

    @property
    def base_commit(self) -> str | None:
        return self.meta.get("base_commit")

    @classmethod
    def create(
        cls,
        project: Path | str,
        root: Path | str,
        *,
        name: str | None = None,
        exclude: Iterable[str] = (),
        secrets: bool = False,
    ) -> Workspace:
        """Make a fresh working copy of ``project`` in a new directory ``root/name``.

        The copy holds what the user sees: for a git project with a commit, tracked plus
        untracked-but-not-ignored files (with their uncommitted changes), in a private git
        repository of its own (never a worktree of the user's: their .git is not shared);
        anything else is copied whole. Directories in :data:`SKIP_DIRS`, names in
        ``exclude`` and, unless ``secrets``, files that look like secrets
        (:func:`is_secret`; listed in ``meta["withheld"]``) are left out.
        """
        project = Path(project)
        if not project.is_dir():
            raise WorkspaceError(f"project {project} is not a directory")
        project = Path(os.path.realpath(project))
        root = Path(os.path.abspath(root))  # git -C would read a relative path from the repo
        repo = git_repo(project)
        guard = repo[0] if repo else project
        if _inside(root, guard):
            raise WorkspaceError(
                f"workspace root {root} is inside the project {guard}; the user's tree is never written"
            )
        name = (
            name
            or f"{re.sub(r'[^A-Za-z0-9._-]', '_', project.name)[:60] or 'project'}-{uuid.uuid4().hex[:8]}"
        )
        if "/" in name or name in (".", "..") or "\x00" in name:
            raise WorkspaceError(f"bad workspace name {name!r}")
        root.mkdir(parents=True, exist_ok=True)
        home = root / name
        try:
            home.mkdir()
        except FileExistsError:
            raise WorkspaceError(f"workspace {home} already exists; open it instead") from None
        excl = frozenset(exclude)
        meta: dict[str, Any] = {
            "version": META_VERSION,
            "project": str(project),
            "mode": "copy",
            "prefix": "",
            "exclude": sorted(excl),
            "created_at": time.time(),
        }
        tree = home / "tree"
        try:
            if repo is not None:
                toplevel, prefix, head = repo
                files, withheld = _copyable(project, True, excl, secrets)
                _copy_tree(project, tree / prefix, files)
                try:
                    _private_repo(tree, toplevel, prefix, files)
                except WorkspaceError:
                    _rmtree(tree)  # no usable git here: a plain copy, made again below
                else:
                    meta.update(mode="git", prefix=prefix, repo=str(toplevel), base_commit=head)
            if meta["mode"] == "copy":
                files, withheld = _copyable(project, False, excl, secrets)
                _copy_tree(project, tree, files)
            meta["withheld"] = withheld
            ws = cls(home, meta)
            ws._write_baseline()
            _write_json(home / META_FILE, meta)
        except BaseException:
            _rmtree(home)
            raise
        return ws

    @property
    def withheld(self) -> list[str]:
        """Secret-looking project files not copied into this workspace."""
        return list(self.meta.get("withheld", ()))

    @classmethod
    def open(cls, path: Path | str) -> Workspace:
        """Reattach to a workspace, given its home directory (``ws.home``) or its root."""
        real = Path(os.path.realpath(path))
        for home in (real, *real.parents):
            meta_path = home / META_FILE
            if not meta_path.is_file():
                continue
            try:
                meta = json.loads(meta_path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise WorkspaceError(
                    f"workspace metadata {meta_path} is unreadable: {exc}"
                ) from None
            ws = cls(home, meta)
            if home != real and ws.root != real:
                break  # a workspace.json that belongs to something else
            if meta.get("version") != META_VERSION:
                raise WorkspaceError(f"workspace {home} has metadata version {meta.get('version')}")
            if not ws.root.is_dir():
                raise WorkspaceError(f"workspace {home} has lost its tree {ws.root}")
            return ws
        raise WorkspaceError(f"{path} is not a portside workspace (no {META_FILE})")

    @staticmethod
    def pristine_copy(
        project: Path | str, dest: Path | str, *, exclude: Iterable[str] = (),
        secrets: bool = False,
    ) -> Path:
        """A plain copy of ``project`` for reference runs (runs write files; the user's tree is
        never written). Unlike a workspace it keeps git-ignored files, since runs need data;
        like one, it leaves out secret-looking files unless ``secrets``."""
        project, dest = Path(project), Path(os.path.abspath(dest))
        if not project.is_dir():
            raise WorkspaceError(f"project {project} is not a directory")
        if _inside(dest, project):
            raise WorkspaceError(f"copy destination {dest} is inside the project {project}")
        if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
            raise WorkspaceError(f"copy destination {dest} exists and is not an empty directory")
        src = Path(os.path.realpath(project))
        _copy_tree(src, dest, _copyable(src, False, frozenset(exclude), secrets)[0])
        return dest

    def dispose(self) -> None:
        """Remove the working copy and its metadata (and, for a workspace made by an older
        portside as a worktree of the user's repo, its registration there)."""
        if self.mode == "git" and (self.tree / ".git").is_file() and Path(self.meta["repo"]).is_dir():
            proc = _git(
                self.meta["repo"],
                "worktree",
                "remove",
                "--force",
                "--force",
                str(self.tree),
                check=False,
            )
            if proc.returncode != 0:
                _rmtree(self.tree)
                _git(self.meta["repo"], "worktree", "prune", check=False)
        _rmtree(self.home)

    # ---- paths and reading

    def resolve(self, rel: str) -> Path:
        """The real path of ``rel`` inside the workspace; WorkspaceError if it would leave it."""
        return Path(_confine(self._root, real_path(rel))[0])

    def relpath(self, rel: str) -> str:
        """``rel`` normalised (real path relative to the root, POSIX separators), as shown."""
        return display_path("/".join(_confine(self._root, real_path(rel))[1]))

    def exists(self, rel: str) -> bool:
        return self.resolve(rel).exists()

    def _walk(self) -> Iterator[str]:
        for dirpath, dirs, files in os.walk(self._root):
            rel_dir = os.path.relpath(dirpath, self._root)
            prefix = "" if rel_dir == "." else rel_dir.replace(os.sep, "/") + "/"
            dirs[:] = sorted(
                d
                for d in dirs
                if d not in SKIP_DIRS
                and d not in self.exclude
                and d not in RESERVED_NAMES
                and not os.path.islink(os.path.join(dirpath, d))
            )
            for f in sorted(files):
                if f in RESERVED_NAMES or f in self.exclude or f.startswith(".portside-tmp-"):
                    continue
                full = os.path.join(dirpath, f)
                if os.path.islink(full):
                    # Listed only when it points at a regular file inside the workspace.
                    try:
                        real, _ = _confine(self._root, prefix + f)
                    except WorkspaceError:
                        continue
                    if not os.path.isfile(real):
                        continue
                else:
                    try:
                        if not stat.S_ISREG(os.lstat(full).st_mode):
                            continue
                    except OSError:
                        continue  # removed while walking
                yield prefix + f

    def list_files(self, pattern: str | None = None, limit: int = 1000) -> Listing:
        """Files matching a glob (``**`` crosses directories; a pattern without '/' matches
        the file name at any depth; a directory name lists everything under it)."""
        pat = (pattern or "").strip()
        if pat.startswith("./"):
            pat = pat[2:]
        if pat and not any(c in pat for c in "*?["):
            real, parts = _confine(self._root, real_path(pat))  # refuses hostile names here too
            if os.path.isdir(real):
                pat = display_path("/".join(parts)) + "/**" if parts else ""
        rx = _glob_regex(pat) if pat else None
        on_name = bool(pat) and "/" not in pat
        out = Listing()
        for rel in map(display_path, self._walk()):  # matched and listed as shown
            if rx is None or rx.match(rel.rsplit("/", 1)[-1] if on_name else rel):
                if len(out) >= limit:
                    out.truncated = True
                    break
                out.append(rel)
        return out

    def _read_text(self, rel: str, limit: int | None) -> tuple[str, str | None]:
        """(normalised path as shown, text or None when missing). Refuses binary files."""
        _, parts = _confine(self._root, real_path(rel))
        data = _read_at(self._root, parts, rel, limit)
        shown = display_path("/".join(parts))
        if data is None:
            return shown, None
        text = _decode(data)
        if text is None:
            raise WorkspaceError(
                f"{rel} is a binary file (not UTF-8 text); it cannot be read or edited as text"
            )
        return shown, text

    def read_file(
        self, rel: str, start_line: int | None = None, end_line: int | None = None
    ) -> str:
        """The text of a file, or lines ``start_line``..``end_line`` (1-based, inclusive)."""
        _, text = self._read_text(rel, self.max_read_bytes)
        if text is None:
            raise WorkspaceError(f"{rel} does not exist")
        if start_line is None and end_line is None:
            return text
        lines = _split_lines(text)
        start = 1 if start_line is None else start_line
        end = len(lines) if end_line is None else end_line
        if start < 1 or (end_line is not None and end_line < start):
            raise WorkspaceError(
                f"bad line range {start_line}..{end_line} for {rel}; lines start at 1"
            )
        if start > max(len(lines), 1):
            raise WorkspaceError(
                f"{rel} has {len(lines)} lines; start_line {start} is past the end"
            )
        return "".join(lines[start - 1 : end])

    def grep(self, regex: str, glob: str | None = None, limit: int = 200) -> GrepHits:
        """Lines matching ``regex`` in text files (optionally only files matching ``glob``)."""
        try:
            rx = re.compile(regex)
        except re.error as exc:
            raise WorkspaceError(f"bad regular expression {regex!r}: {exc}") from None
        hits = GrepHits()
        for rel in self.list_files(glob, limit=100_000):
            if os.path.islink(os.path.join(self._root, real_path(rel))):
                continue  # its target is searched under its own name
            try:
                _, text = self._read_text(rel, self.max_read_bytes)
            except WorkspaceError:
                continue  # binary or too large: not searchable as text
            for no, line in enumerate((text or "").split("\n"), 1):
                if rx.search(line):
                    if len(hits) >= limit:
                        hits.truncated = True
                        return hits
                    hits.append(GrepHit(rel, no, line if len(line) <= 400 else line[:400] + "..."))
        return hits

    # ---- edits

    def propose_replace(self, rel: str, old: str, new: str, *, edit_id: str | None = None) -> Edit:
        """An edit replacing the one occurrence of ``old`` with ``new``. Nothing is written."""
        path, text = self._read_text(rel, self.max_read_bytes)
        if text is None:
            raise WorkspaceError(f"{rel} does not exist; write the whole file to create it")
        if not old:
            raise WorkspaceError(f"the text to replace in {rel} is empty")
        if old == new:
            raise WorkspaceError(f"the replacement for {rel} is identical to the original text")
        count = text.count(old)
        if count == 0 and "\r\n" in text and "\n" in old and "\r\n" not in old:
            # The agent usually writes "\n"; meet a CRLF file halfway.
            old, new = old.replace("\n", "\r\n"), new.replace("\n", "\r\n")
            count = text.count(old)
        if count == 0:
            raise WorkspaceError(
                f"the text to replace was not found in {rel} (0 matches); read the file again and "
                "copy the text exactly, including whitespace"
            )
        if count > 1:
            starts = [m.start() for m in re.finditer(re.escape(old), text)]
            lines = ", ".join(str(text.count("\n", 0, s) + 1) for s in starts[:10])
            raise WorkspaceError(
                f"the text to replace occurs {count} times in {rel} (at lines {lines}); include "
                "more surrounding text so it matches exactly once"
            )
        return Edit(edit_id or uuid.uuid4().hex[:12], path, text, text.replace(old, new, 1))

    def propose_write(self, rel: str, content: str, *, edit_id: str | None = None) -> Edit:
        """An edit setting the whole file to ``content`` (creating it, and any missing
        directories, if needed). Nothing is written."""
        if not isinstance(content, str):
            raise WorkspaceError(f"content for {rel} must be text")
        path, text = self._read_text(rel, self.max_read_bytes)
        if not path:
            raise WorkspaceError(f"{rel!r} is the workspace root, not a file")
        if self.resolve(rel).is_dir():
            raise WorkspaceError(f"{rel} is a directory")
        if text == content:
            raise WorkspaceError(f"writing {rel} would not change it")
        return Edit(
            edit_id or uuid.uuid4().hex[:12], path, text or "", content, new_file=text is None
        )

    def _current(self, edit: Edit) -> tuple[list[str], str | None]:
        _, parts = _confine(self._root, real_path(edit.path))
        data = _read_at(self._root, parts, edit.path, None)
        if data is None:
            return parts, None
        text = _decode(data)
        if text is None:
            raise WorkspaceError(
                f"{edit.path} is now a binary file; edit {edit.edit_id} no longer applies"
            )
        return parts, text

    def apply(self, edit: Edit, after: str | None = None) -> Edit:
        """Write an approved edit (``after`` overrides its text, for a reviewer-edited
        proposal). Refused unless the file still holds ``edit.before``. Returns the edit as
        applied, which is what :meth:`revert` takes."""
        if after is not None:
            edit = replace(edit, after=after)
        parts, current = self._current(edit)
        if edit.new_file:
            if current is not None:
                raise WorkspaceError(
                    f"{edit.path} was created since edit {edit.edit_id} was proposed as a new file; "
                    "the edit no longer applies"
                )
        elif current is None:
            raise WorkspaceError(
                f"{edit.path} was deleted since edit {edit.edit_id} was proposed; the edit no longer applies"
            )
        elif current != edit.before:
            raise WorkspaceError(
                f"{edit.path} changed since edit {edit.edit_id} was proposed: its content is not "
                "what the edit was made against, so the edit no longer applies; propose it again"
            )
        _write_at(self._root, parts, edit.path, edit.after.encode("utf-8"))
        return edit

    def revert(self, edit: Edit) -> None:
        """Undo an applied edit; refused unless the file still holds ``edit.after``."""
        parts, current = self._current(edit)
        if current != edit.after:
            state = "is missing" if current is None else "no longer holds the edit's text"
            raise WorkspaceError(
                f"cannot revert edit {edit.edit_id}: {edit.path} {state} (was it applied, or "
                "changed since?)"
            )
        if edit.new_file:
            _unlink_at(self._root, parts, edit.path)
        else:
            _write_at(self._root, parts, edit.path, edit.before.encode("utf-8"))

    # ---- baseline, changes, patches

    @property
    def _baseline_dir(self) -> Path:
        return self.home / "baseline"

    def _visible(self) -> list[str]:
        return _visible_files(self.root, self.mode == "git", self.exclude, self.tree)

    def _write_baseline(self) -> None:
        blobs = self._baseline_dir / "blobs"
        blobs.mkdir(parents=True, exist_ok=True)
        manifest: dict[str, dict[str, Any]] = {}
        for rel in self._visible():
            entry = _entry(self.root, rel)
            if entry is None:
                continue
            if entry["kind"] == "file" and entry["size"] <= BLOB_LIMIT:
                blob = blobs / entry["sha"]
                if not blob.exists():
                    shutil.copyfile(self.root / rel, blob)
                    os.chmod(blob, 0o444)
                entry["blob"] = True
            manifest[rel] = entry
        _write_json(self._baseline_dir / "manifest.json", manifest)
        self._manifest = manifest

    @property
    def baseline(self) -> dict[str, dict[str, Any]]:
        """What each project file looked like when the workspace was created."""
        if self._manifest is None:
            self._manifest = json.loads(
                (self._baseline_dir / "manifest.json").read_text(encoding="utf-8")
            )
        return self._manifest

    def _baseline_text(self, rel: str) -> str | None:
        entry = self.baseline.get(rel)
        if entry is None or entry["kind"] != "file" or not entry.get("blob"):
            return None
        return _decode((self._baseline_dir / "blobs" / entry["sha"]).read_bytes())

    def _norm(self, rel: str) -> str:
        # Lexical only: a deleted file has nothing on disk left to resolve.
        return "/".join(_check_rel(real_path(rel)))

    def _diffable(
        self, paths: Iterable[str] | None = None
    ) -> Iterator[
        tuple[Change, str | None, str | None, dict[str, Any] | None, dict[str, Any] | None]
    ]:
        base = self.baseline
        only = None if paths is None else {self._norm(p) for p in paths}
        current = {}
        for rel in self._visible():
            if only is not None and rel not in only:
                continue
            entry = _entry(self.root, rel, base.get(rel))
            if entry is not None:
                current[rel] = entry
        for rel in sorted(set(base) | set(current)):
            if only is not None and rel not in only:
                continue
            b, c = base.get(rel), current.get(rel)
            if _same(b, c):
                continue
            status = "added" if b is None else "deleted" if c is None else "modified"
            old = new = None
            reason = ""
            if (b and b["kind"] == "link") or (c and c["kind"] == "link"):
                reason = "symlink"
            else:
                if b is not None:
                    old = self._baseline_text(rel)
                    if old is None:
                        reason = "binary or too large"
                if c is not None and not reason:
                    if c["size"] > BLOB_LIMIT:
                        reason = "too large"
                    else:
                        data = _read_at(self._root, rel.split("/"), rel, None)
                        new = None if data is None else _decode(data)
                        if new is None:
                            reason = "binary"
            yield Change(rel, status, not reason, reason), old, new, b, c

    def changes(self, paths: Iterable[str] | None = None) -> list[Change]:
        """Every path that differs from the baseline; ``patchable`` ones are in the patch
        (paths as shown: :func:`display_path`)."""
        return [replace(change, path=display_path(change.path))
                for change, *_ in self._diffable(paths)]

    def diff_patch(self, paths: Iterable[str] | None = None) -> str:
        """The workspace against its baseline as a ``git diff``-style patch, appliable with
        ``git apply`` (or ``patch -p1``) to the project as it was when the workspace was
        made. Binary/oversized files and symlinks are left out; see :meth:`changes`.
        ``paths`` limits it to those files (e.g. the ones approved edits touched, leaving out
        what runs wrote)."""
        out: list[str] = []
        for change, old, new, b, c in self._diffable(paths):
            if not change.patchable:
                continue
            a_name, b_name = _quote_path("a/" + change.path), _quote_path("b/" + change.path)
            out.append(f"diff --git {a_name} {b_name}\n")
            if b is None:
                out.append(f"new file mode {c['mode']}\n")  # type: ignore[index]
                a_name = "/dev/null"
            elif c is None:
                out.append(f"deleted file mode {b['mode']}\n")
                b_name = "/dev/null"
            elif b["mode"] != c["mode"]:
                out.append(f"old mode {b['mode']}\nnew mode {c['mode']}\n")
            out.extend(_diff_lines(old or "", new or "", a_name, b_name, 3))
        return "".join(out)

    def export_patch(self, path: Path | str, paths: Iterable[str] | None = None) -> Path:
        path = Path(path)
        if _inside(path, self.project):
            raise WorkspaceError(
                f"refusing to write the patch inside the project {self.project}; use write_back"
            )
        path.write_text(self.diff_patch(paths), encoding="utf-8")
        return path

    def write_back(
        self,
        project: Path | str | None = None,
        force: bool = False,
        paths: Iterable[str] | None = None,
    ) -> list[str]:
        """Copy the workspace's patchable changes into the user's project. Only on explicit
        request. Refused (unless ``force``) for any file the user changed since the workspace
        was made. Returns the paths written or deleted."""
        target = Path(os.path.realpath(project if project is not None else self.project))
        troot = str(target)
        plan = [(ch, c) for ch, _old, _new, _b, c in self._diffable(paths) if ch.patchable]
        if not force:
            conflicts = []
            for ch, _ in plan:
                _, parts = _confine(troot, ch.path)
                base = self.baseline.get(ch.path)
                data = _read_at(troot, parts, ch.path, None)
                theirs = None if data is None else hashlib.sha256(data).hexdigest()
                if theirs != (base["sha"] if base else None):
                    conflicts.append(ch.path)
            if conflicts:
                raise WorkspaceError(
                    f"not writing back: {', '.join(conflicts)} changed in {target} since the "
                    "workspace was made; export a patch instead, or force"
                )
        done = []
        for ch, c in plan:
            _, parts = _confine(troot, ch.path)
            if c is None:
                _unlink_at(troot, parts, ch.path)
            else:
                mode = 0o755 if c["mode"] == "100755" else 0o644
                data = _read_at(self._root, ch.path.split("/"), ch.path, None) or b""
                _write_at(troot, parts, ch.path, data, mode)
            done.append(display_path(ch.path))
        return done

    def __repr__(self) -> str:
        return f"Workspace(root={str(self.root)!r}, mode={self.mode!r})"
