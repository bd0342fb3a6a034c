"""Confinement: every path the agent or a copy is given, resolved inside one root and opened
without ever following a link out of it. The security boundary of the workspace, on its own.

Two steps, both needed. :func:`confine` refuses a path lexically first (absolute, ``~``,
``..``, NUL, too long, ``.git`` or ``.portside``) and then by where it resolves (a symlink
leading out, a special file). Between that check and the open, a run in the tree could swap a
directory for a symlink, so :func:`read_at`, :func:`write_at` and :func:`unlink_at` walk the
components again from the root with ``openat`` and ``O_NOFOLLOW``: a swapped component fails
instead of being followed. A write is a temp file and a rename in the same directory, so it
never writes through a link to another inode.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import uuid
from pathlib import Path

from .names import WorkspaceError

__all__ = ["MAX_COMPONENT_BYTES", "MAX_PATH_CHARS", "RESERVED_NAMES", "check_rel", "confine",
           "confined_parts", "file_kind", "read_at", "read_confined", "unlink_at",
           "unlink_confined", "write_at", "write_confined"]

#: Names the agent may never address, at any depth (``.portside`` is reserved for metadata).
RESERVED_NAMES = frozenset({".git", ".portside"})
MAX_PATH_CHARS = 1024
MAX_COMPONENT_BYTES = 255  # NAME_MAX on Linux and macOS

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_DIR_NOFOLLOW = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _O_CLOEXEC


def check_rel(rel: object) -> list[str]:
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


def confine(root: str, rel: str) -> tuple[str, list[str]]:
    """Resolve ``rel`` under ``root`` (a realpath). Returns the real path and its components
    relative to root; raises WorkspaceError when it leaves root or names a special file."""
    parts = check_rel(rel)
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
            f"refused path {rel!r}: it is a {file_kind(st.st_mode)}, not a regular file or directory"
        )
    return real, inner


def file_kind(mode: int) -> str:
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


def read_at(root: str, parts: list[str], rel: str, limit: int | None) -> bytes | None:
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
        raise WorkspaceError(f"refused path {rel!r}: it is a {file_kind(st.st_mode)}")
    with os.fdopen(fd, "rb") as fh:
        if limit is not None and st.st_size > limit:
            raise WorkspaceError(
                f"{rel} is {st.st_size} bytes, more than the {limit} bytes that can be read; "
                "read a line range or grep it instead"
            )
        return fh.read()


def write_at(root: str, parts: list[str], rel: str, data: bytes, mode: int | None = None) -> None:
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
            raise WorkspaceError(f"cannot write {rel}: it is a {file_kind(st.st_mode)}")
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


def unlink_at(root: str, parts: list[str], rel: str) -> None:
    if not parts:
        raise WorkspaceError(f"{rel!r} is the workspace root, not a file")
    try:
        dfd = _open_dir(root, parts[:-1], rel)
    except FileNotFoundError:
        return
    try:
        st = os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode):
            raise WorkspaceError(f"cannot delete {rel}: it is a {file_kind(st.st_mode)}")
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
    return confine(os.path.realpath(root), rel)[1]


def read_confined(root: Path | str, rel: str) -> bytes | None:
    """A file's bytes under ``root`` (None when missing), never through a symlink out."""
    real = os.path.realpath(root)
    return read_at(real, confine(real, rel)[1], rel, None)


def write_confined(root: Path | str, rel: str, data: bytes) -> None:
    """Replace (or create) a file under ``root``; no directory on the way may be a symlink."""
    real = os.path.realpath(root)
    write_at(real, confine(real, rel)[1], rel, data)


def unlink_confined(root: Path | str, rel: str) -> None:
    real = os.path.realpath(root)
    unlink_at(real, confine(real, rel)[1], rel)
