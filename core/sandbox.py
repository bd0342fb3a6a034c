"""The OS sandbox around commands that run agent-written code (bubblewrap on Linux).

Inside it: the whole filesystem read-only; the user's project (and its git repo), their home
directory and portside's work root hidden behind empty tmpfs; a private ``/tmp`` and ``/run``
(no host sockets, e.g. docker's); the run's working directory and the probe's output directory
read-write; the Python the command uses re-exposed read-only where it lives under a hidden
directory (a venv in the home or the project). Its own PID namespace: when the command ends,
or portside dies (``--die-with-parent``), every process it started dies with it, including
those that ``setsid()`` or double-fork. No network unless asked for (criteria
``[sandbox] network``); loopback always works. No capabilities, no new privileges (bubblewrap's
defaults).

:func:`unavailable` says why a sandbox cannot be made here (not Linux, no ``bwrap``, no user
namespaces); :meth:`Sandbox.wrap` turns any argv into its sandboxed argv, for runs and for
commands an agent runs alike.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import json
import os
import pwd
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

__all__ = ["Confinement", "Sandbox", "auto_refusal", "bwrap_path", "register_workspace",
           "session_sandbox", "unavailable", "wrap_shell"]

#: Device nodes accelerators need, bound through when present (the rest of /dev is minimal).
DEVICE_GLOBS = (
    "/dev/nvidia*", "/dev/nvidia-caps", "/dev/dri", "/dev/accel*", "/dev/vfio", "/dev/kfd",
    "/dev/infiniband",
)
#: Always private inside the sandbox.
PRIVATE_DIRS = ("/tmp", "/run", "/var/run", "/var/tmp", "/dev/shm")
_PYTHON = re.compile(r"^python[0-9.]*$")
_QUERY = (
    "import json, sys; print(json.dumps([sys.executable, sys.prefix, sys.exec_prefix,"
    " sys.base_prefix, sys.base_exec_prefix, *sys.path]))"
)


def bwrap_path() -> str | None:
    """The bubblewrap binary (``PORTSIDE_BWRAP`` overrides, e.g. to point at another build)."""
    name = os.environ.get("PORTSIDE_BWRAP", "bwrap")
    return shutil.which(name)


@functools.lru_cache(maxsize=4)
def _probe(bwrap: str) -> str | None:
    try:
        proc = subprocess.run(
            [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid",
             "--unshare-net", "--die-with-parent", "--", "/bin/true"],
            capture_output=True, timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap ({bwrap}) could not be started: {exc}"
    if proc.returncode != 0:
        msg = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        return (f"bubblewrap ({bwrap}) cannot create namespaces here (user namespaces disabled?):"
                f" {msg[-1] if msg else f'exit {proc.returncode}'}")
    return None


def unavailable() -> str | None:
    """Why commands cannot be sandboxed on this machine, or None when they can."""
    if not sys.platform.startswith("linux"):
        return f"no sandbox on {sys.platform}: bubblewrap needs Linux namespaces"
    bwrap = bwrap_path()
    if bwrap is None:
        return ("bubblewrap (bwrap) is not installed: `apt-get install bubblewrap` "
                "(or dnf/pacman install bubblewrap)")
    return _probe(bwrap)


def _real(path: str | os.PathLike[str]) -> str:
    return os.path.realpath(os.path.abspath(os.fspath(path)))


def _within(path: str, root: str) -> bool:
    return root == "/" or path == root or path.startswith(root.rstrip("/") + "/")


def _project_roots(project: str | os.PathLike[str]) -> list[str]:
    """The project and the git repository around it (its .git holds the user's config)."""
    proj = _real(project)
    out = [proj]
    for d in (proj, *[str(p) for p in Path(proj).parents]):
        if os.path.lexists(os.path.join(d, ".git")):
            out.append(d if d != "/" else "/.git")
            break
    return out


def _homes() -> list[str]:
    homes = {os.environ.get("HOME", "")}
    with contextlib.suppress(KeyError):
        homes.add(pwd.getpwuid(os.getuid()).pw_dir)
    return [_real(h) for h in sorted(homes) if h and _real(h) != "/"]


@dataclass(frozen=True)
class Sandbox:
    """A bubblewrap profile. ``hidden``: directories replaced by an empty read-only tmpfs (a
    write there fails loudly: "Read-only file system"); ``scratch``: replaced by an empty
    writable tmpfs that vanishes with the run (the home: tools keep caches there);
    ``writable``: bound read-write (the run's cwd is always added); ``network``: share the
    host's network."""

    hidden: tuple[str, ...] = ()
    scratch: tuple[str, ...] = ()
    writable: tuple[str, ...] = ()
    readable: tuple[str, ...] = ()  # re-exposed read-only (portside's probe)
    protected: tuple[str, ...] = ()  # hidden, and never re-exposed for PYTHONPATH (the project)
    network: bool = False
    bwrap: str = "bwrap"

    @classmethod
    def for_project(cls, project: str | os.PathLike[str], *more: str | os.PathLike[str] | None,
                    network: bool = False, bwrap: str | None = None) -> Sandbox:
        """Hides the project, the git repo around it, the user's home and ``more`` (portside's
        work root)."""
        roots = _project_roots(project)
        hidden = (*roots, *(_real(m) for m in more if m))
        return cls(hidden=tuple(dict.fromkeys(hidden)), scratch=tuple(_homes()),
                   protected=tuple(roots), network=network, bwrap=bwrap or bwrap_path() or "bwrap")

    def with_writable(self, *paths: str | os.PathLike[str]) -> Sandbox:
        return replace(self, writable=(*self.writable, *(_real(p) for p in paths)))

    def with_readable(self, *paths: str | os.PathLike[str]) -> Sandbox:
        return replace(self, readable=(*self.readable, *(_real(p) for p in paths)))

    def _hidden_all(self) -> list[str]:
        return [h for h in (*PRIVATE_DIRS, *self.scratch, *self.hidden) if h != "/"]

    def _is_hidden(self, path: str) -> bool:
        return any(_within(path, h) for h in self._hidden_all())

    def _exposable(self, path: str) -> bool:
        """Under a hidden dir, and not itself holding one (never re-expose the project or home)."""
        if not path or not os.path.exists(path) or not self._is_hidden(path):
            return False
        return not any(_within(h, path) for h in (*self.hidden, *self.scratch))

    def readable_for(self, argv: Sequence[str], cwd: str, env: Mapping[str, str]) -> list[str]:
        """Paths of the Python(s) the command uses (prefixes, site-packages, PYTHONPATH's
        entries that are environments) that the hiding would otherwise take away."""
        paths: list[str] = []
        for interp in _interpreters(argv, cwd, env):
            for p in _python_paths(interp, _key_env(env)):
                paths.append(_real(p))
        for p in env.get("PYTHONPATH", "").split(os.pathsep):
            # The user's own code on PYTHONPATH stays hidden: runs import their copy of it.
            if p and os.path.isabs(p) and not any(_within(_real(p), q) for q in self.protected):
                paths.append(_real(p))
        paths += self.readable
        out: list[str] = []
        for p in dict.fromkeys(paths):
            if self._exposable(p) and not any(_within(p, q) for q in out):
                out.append(p)
        return out

    def wrap(self, argv: Sequence[str], cwd: str | os.PathLike[str],
             env: Mapping[str, str] | None = None) -> list[str]:
        """The bwrap argv that runs ``argv`` in ``cwd`` (read-write) inside the sandbox."""
        env = os.environ if env is None else env
        cwd_r = _real(cwd)
        out = [self.bwrap, "--die-with-parent", "--new-session", "--unshare-pid",
               "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        if not self.network:
            out.append("--unshare-net")
        out += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        for pattern in DEVICE_GLOBS:
            for dev in sorted(glob.glob(pattern)):
                out += ["--dev-bind-try", dev, dev]
        hidden = sorted(dict.fromkeys(self._hidden_all()), key=lambda p: p.count("/"))
        done: list[str] = []
        for h in hidden:
            if any(_within(h, d) for d in done):
                continue  # already inside a hidden directory
            if os.path.isdir(h) and not os.path.islink(h):
                out += ["--tmpfs", h]
                done.append(h)
            elif os.path.lexists(h) and not os.path.islink(h):
                out += ["--ro-bind", "/dev/null", h]
        if self.network:
            # /etc/resolv.conf often points into /run (systemd-resolved): keep DNS working.
            resolv = os.path.realpath("/etc/resolv.conf")
            if _within(resolv, "/run"):
                out += ["--ro-bind-try", os.path.dirname(resolv), os.path.dirname(resolv)]
        for p in self.readable_for(argv, cwd_r, env):
            out += ["--ro-bind-try", p, p]
        for w in dict.fromkeys((*self.writable, cwd_r)):
            out += ["--bind", w, w]
        # Last: the mount points of the binds above had to be made in these first.
        for h in done:
            if h in self.hidden and not any(_within(h, s) for s in self.scratch):
                out += ["--remount-ro", h]
        out += ["--setenv", "TMPDIR", "/tmp", "--chdir", cwd_r, "--", *argv]
        return out

    def wrap_command(self, command: str, cwd: str | os.PathLike[str],
                     env: Mapping[str, str] | None = None) -> str:
        """A shell command line that runs ``command`` (a shell string) in the sandbox: for
        commands an agent runs through a tool that takes a string (e.g. Claude Code's Bash)."""
        return shlex.join(self.wrap(["/bin/sh", "-c", command], cwd, env))


# --- which Python a command uses ------------------------------------------------------------


def _key_env(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    keep = ("PATH", "PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE", "HOME", "VIRTUAL_ENV")
    return tuple((k, env[k]) for k in keep if k in env)


def _shebang(path: str) -> str | None:
    try:
        with open(path, "rb") as fh:
            first = fh.readline(256)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode("utf-8", "replace").split()
    if not words:
        return None
    if os.path.basename(words[0]) == "env" and len(words) > 1:
        return words[1]
    return words[0]


def _interpreters(argv: Sequence[str], cwd: str, env: Mapping[str, str]) -> list[str]:
    """Python interpreters named in the command (``python``, a path to one, a script with a
    python shebang such as torchrun), plus python3/python on the run's PATH."""
    words: list[str] = []
    for a in argv:
        try:
            words += shlex.split(a)
        except ValueError:
            words += a.split()
    words += ["python3", "python"]
    path = env.get("PATH", os.defpath)
    found: list[str] = []
    for w in words:
        w = w.lstrip("(")
        if not w or "=" in w.split("/")[0]:
            continue
        exe = (os.path.join(cwd, w) if not os.path.isabs(w) else w) if "/" in w else \
            shutil.which(w, path=path)
        if not exe or not os.path.isfile(exe) or not os.access(exe, os.X_OK):
            continue
        if not _PYTHON.match(os.path.basename(exe)):
            interp = _shebang(exe)
            if interp is None:
                continue
            exe = interp if "/" in interp else (shutil.which(interp, path=path) or "")
            if not exe or not _PYTHON.match(os.path.basename(exe)):
                continue
        found.append(os.path.abspath(exe))
    return list(dict.fromkeys(found))


@functools.lru_cache(maxsize=64)
def _python_paths(interp: str, env: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    """sys.prefix & co. and the site-packages of an interpreter, asked of it once."""
    try:
        proc = subprocess.run([interp, "-c", _QUERY], env=dict(env), capture_output=True,
                              timeout=30, stdin=subprocess.DEVNULL)
        data = json.loads(proc.stdout)
    except (OSError, subprocess.TimeoutExpired, ValueError):
        data = []
    paths = [os.path.dirname(interp), os.path.dirname(os.path.realpath(interp))]
    if isinstance(data, list) and data:
        exe, *prefixes = [str(x) for x in data[:5]]
        paths += [os.path.dirname(exe), *prefixes]
        paths += [str(p) for p in data[5:] if p and "-packages" in str(p)]
    return tuple(p for p in paths if p)


# --- agent sessions ------------------------------------------------------------------------

#: The sandbox of each live agent session, by its workspace tree (see :func:`wrap_shell`).
_BY_WORKSPACE: dict[str, Sandbox] = {}


def register_workspace(tree: str | os.PathLike[str], sandbox: Sandbox | None) -> None:
    """The engine says which sandbox the commands run in its workspace get (None: none)."""
    if sandbox is None:
        _BY_WORKSPACE.pop(_real(tree), None)
    else:
        _BY_WORKSPACE[_real(tree)] = sandbox


def wrap_shell(command: str, cwd: str | os.PathLike[str]) -> str:
    """A command an agent runs (Claude Code's Bash, a shell string) as a command line inside
    the sandbox of the session whose workspace holds ``cwd``; unchanged when that session has
    no sandbox (its state line says so, and --policy auto was refused or --no-sandbox given)."""
    where = _real(cwd)
    for tree, sb in _BY_WORKSPACE.items():
        if _within(where, tree):
            return sb.wrap_command(command, where)
    return command



def auto_refusal(policy: str, has_agent: bool, no_sandbox: bool) -> str:
    """Why an agent session under ``--policy auto`` (its code runs with nobody reviewing it)
    must not start here: no sandbox, and the user did not say ``--no-sandbox``. "" if fine."""
    if not has_agent or policy != "auto" or no_sandbox:
        return ""
    reason = unavailable()
    if reason is None:
        return ""
    return (f"runs cannot be sandboxed here ({reason}); --policy auto would run the agent's "
            "code unreviewed and unconfined as you. Pass --no-sandbox to accept that, or use "
            "--policy ask")


@dataclass(frozen=True)
class Confinement:
    """What an agent session's runs get: the sandbox (None: unconfined), a session.state for
    the screen, and why the session must not go on ("" when it may)."""

    sandbox: Sandbox | None
    state: str  # "sandboxed" | "unsandboxed"
    detail: str
    refused: str = ""


def session_sandbox(project: str | os.PathLike[str], work_root: str | os.PathLike[str] | None,
                    *, network: bool, wanted: bool, policy: str, has_agent: bool,
                    writable: Sequence[str | os.PathLike[str]] = (),
                    withheld: Sequence[str] = ()) -> Confinement:
    """The sandbox of an agent session's runs (references and candidates alike, so both run
    in the same world). ``wanted`` False: the user said --no-sandbox."""
    kept = ""
    if withheld:
        names = ", ".join(withheld[:5]) + (f" and {len(withheld) - 5} more" if len(withheld) > 5
                                           else "")
        kept = f"; secret-looking files not copied: {names} ([sandbox] secrets = true to copy)"
    reason = unavailable() if wanted else "turned off with --no-sandbox"
    if reason is None:
        sb = Sandbox.for_project(project, work_root, network=network).with_writable(*writable)
        net = "network on" if network else "no network"
        return Confinement(sb, "sandboxed", f"runs in bubblewrap: project and home hidden, "
                                            f"only the workspace writable, {net}{kept}")
    refused = auto_refusal(policy, has_agent, not wanted)
    return Confinement(None, "unsandboxed", f"runs are NOT sandboxed: {reason}; the agent's "
                                            f"code runs as you{kept}", refused)
