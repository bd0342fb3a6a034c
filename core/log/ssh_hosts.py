"""How an SSH host is named: on the command line, in criteria (``[hosts]``), in the log.

The grammar only, so criteria can check a host list without loading the SSH executor
(core/run/ssh.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ALIAS = re.compile(r"^[A-Za-z0-9_.%+-][A-Za-z0-9_.%+@-]*$")


@dataclass(frozen=True)
class Host:
    spec: str  # as the user wrote it: the name shown with every fault
    dest: str  # a hostname or a Host alias of the ssh config
    user: str | None = None
    port: int | None = None
    base: str | None = None  # where session folders go (default: the remote home)


def parse_host(spec: str) -> Host:
    """``ssh://[user@]host[:port][/remote/dir]`` or a bare Host alias; ValueError names what."""
    text = spec.strip()
    if text.startswith("ssh://"):
        rest = text[len("ssh://"):]
        where, slash, path = rest.partition("/")
        user, at, hostport = where.rpartition("@")
        host, colon, port = hostport.partition(":")
        if not host or (at and not user):
            raise ValueError(f"{spec!r}: expected ssh://[user@]host[:port][/remote/dir]")
        if colon and not (port.isdigit() and 0 < int(port) < 65536):
            raise ValueError(f"{spec!r}: port {port!r} is not a number from 1 to 65535")
        if user.startswith("-"):  # ssh would read it as an option
            raise ValueError(f"{spec!r}: the user {user!r} starts with '-'; expected "
                             "ssh://[user@]host[:port][/remote/dir]")
        if not _ALIAS.match(host) or host.startswith("-") or (user and not _ALIAS.match(user)):
            raise ValueError(f"{spec!r}: {host!r} is not a host name")
        return Host(text, host, user or None, int(port) if colon else None,
                    "/" + path.rstrip("/") if slash and path.strip("/") else None)
    if not text or not _ALIAS.match(text) or text.startswith("-"):
        raise ValueError(f"{spec!r}: expected ssh://[user@]host[:port][/remote/dir] or a Host "
                         "alias of the ssh config")
    user, at, host = text.rpartition("@")
    if not host or host.startswith("-"):
        raise ValueError(f"{spec!r}: expected ssh://[user@]host[:port][/remote/dir] or a Host "
                         "alias of the ssh config")
    return Host(text, host, user or None)


def parse_hosts(spec: str) -> tuple[Host, ...]:
    """One host, or a comma-separated slice of them."""
    parts = [p.strip() for p in spec.split(",")]
    if any(not p for p in parts):
        raise ValueError(f"{spec!r}: an empty host in the list")
    hosts = tuple(parse_host(p) for p in parts)
    if len(set(hosts)) != len(hosts):
        raise ValueError(f"{spec!r}: a host is named twice")
    return hosts
