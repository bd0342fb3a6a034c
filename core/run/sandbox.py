"""The OS sandbox around commands that run agent-written code (bubblewrap on Linux).

Inside it, an allow-list: the root is an empty read-only tmpfs into which only what a run needs
is bound. Read-only: the system (``/usr``, ``/etc``, ``/sys`` and the ``/bin``, ``/sbin`` and
``/lib*`` beside them, ``/nix/store`` where there is one), the Python(s) the command uses
(prefixes, site-packages, environments on PYTHONPATH: found from outside, see
:meth:`Sandbox.readable_for`) and portside's probe. Read-write: the run's working directory and
the probe's output directory. Private and empty: ``/tmp``, ``/run``, ``/var/tmp``, ``/dev/shm``
and the user's home (a writable scratch tmpfs: tools keep caches there). Nothing else of the host
exists in it: not portside's database wherever ``--db`` put it, not other sessions' folders, not
another study task's project. The user's project (and its git repo) and portside's work root
are also covered by an empty read-only tmpfs wherever one of the binds above would show them.
``/dev`` is read-only: the standard nodes (null, zero, full, random, urandom, tty, a private
pts) and the host's accelerator nodes, so no file can be made there (a regular file named
``/dev/accel0`` is no TPU). Its own PID namespace: when the command ends, or portside dies
(``--die-with-parent``), every process it started dies with it, including those that
``setsid()`` or double-fork. No network unless asked for (criteria ``[sandbox] network``);
loopback always works.

Hardened for portside running as root too: a user namespace (root maps to ``nobody`` inside;
on the host the run's files stay root's, see below), every capability dropped (bubblewrap
keeps them for a privileged caller unless told), no new privileges, no further user namespaces
(``--disable-userns``) and a seccomp filter (core/run/seccomp.py) that refuses mounts, new
namespaces, ptrace and the like. Mounts made before the user namespace are locked in it: even
a capability regained could not remount them read-write. The run is not mapped to an
unprivileged *host* uid: bubblewrap maps only its own uid, and a uid other than root's would
lose what root's runs need (the workspace and probe files it writes, ``/dev/vfio`` and
``/dev/accel*`` of a TPU, a venv under ``/root``). Limits on processes and memory
(core/run/limits.py) and sized private tmpfs mounts come from criteria ``[sandbox]``.

Nothing the agent can write is run or read as a program outside the sandbox: finding which
Python a command uses (to expose it) never looks at a path under the run's writable
directories or portside's work root.

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
import stat
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from portside.core.run import seccomp
from portside.core.run.limits import Limits

__all__ = ["SECCOMP_FD", "Confinement", "Sandbox", "auto_refusal", "bwrap_path",
           "hardening", "limits_of", "register_workspace", "session_sandbox", "unavailable", "wrap_shell"]

#: Device nodes accelerators need, bound through when present (the rest of /dev is minimal):
#: character devices, or folders of them, of the host only.
DEVICE_GLOBS = (
    "/dev/nvidia*", "/dev/nvidia-caps", "/dev/dri", "/dev/accel*", "/dev/vfio", "/dev/kfd",
    "/dev/infiniband",
)
#: Always private inside the sandbox.
PRIVATE_DIRS = ("/tmp", "/run", "/var/run", "/var/tmp", "/dev/shm")
#: The system a run sees, read-only (where a top-level one is a link, as with a merged /usr,
#: the link is made instead). Everything else is bound in by name or does not exist inside.
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/sys",
               "/nix/store")
_PYTHON = re.compile(r"^python[0-9.]*$")
_QUERY = (
    "import json, sys; print(json.dumps([sys.executable, sys.prefix, sys.exec_prefix,"
    " sys.base_prefix, sys.base_exec_prefix, *sys.path]))"
)
#: The descriptor bubblewrap reads the seccomp filter from in shell command lines.
SECCOMP_FD = 3
NOBODY = 65534


def bwrap_path() -> str | None:
    """The bubblewrap binary (``PORTSIDE_BWRAP`` overrides, e.g. to point at another build)."""
    name = os.environ.get("PORTSIDE_BWRAP", "bwrap")
    return shutil.which(name)


def _try(bwrap: str, extra: Sequence[str]) -> tuple[int, str]:
    """Run /bin/true in a minimal sandbox with ``extra`` flags (and the seccomp filter, if
    asked for, through SECCOMP_FD): its exit status and last stderr line."""
    argv = [bwrap, *extra, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--unshare-pid", "--unshare-net", "--die-with-parent", "--", "/bin/true"]
    fds: tuple[int, ...] = ()
    if "--seccomp" in extra:
        fd = os.open(seccomp.filter_path(), os.O_RDONLY)
        argv[argv.index("--seccomp") + 1] = str(fd)
        fds = (fd,)
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=20, pass_fds=fds)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return -1, str(exc)
    finally:
        for fd in fds:
            os.close(fd)
    msg = proc.stderr.decode("utf-8", "replace").strip().splitlines()
    return proc.returncode, msg[-1] if msg else f"exit {proc.returncode}"


@dataclass(frozen=True)
class _Profile:
    flags: tuple[str, ...] = ()  # "--seccomp" is followed by a placeholder fd
    sized: bool = False  # --size before --tmpfs works
    error: str | None = None


@functools.lru_cache(maxsize=4)
def _hardening(bwrap: str) -> _Profile:
    """The hardening flags this bubblewrap takes here (``--seccomp`` with a placeholder fd),
    or why it cannot make a sandbox at all. A user namespace is used where it can be made
    (setuid bubblewraps on kernels without unprivileged ones cannot); the capability drop
    and the seccomp filter are required."""
    try:
        helptext = subprocess.run([bwrap, "--help"], capture_output=True, text=True,
                                  timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return _Profile(error=f"bubblewrap ({bwrap}) could not be started: {exc}")
    base = ["--cap-drop", "ALL"]
    if seccomp.supported():
        if "--seccomp" not in helptext:
            return _Profile(error=f"bubblewrap ({bwrap}) is too old: it has no --seccomp")
        base += ["--seccomp", "-1"]
    userns = ["--unshare-user"]
    if "--disable-userns" in helptext:
        userns.append("--disable-userns")
    if os.getuid() == 0:
        userns += ["--uid", str(NOBODY), "--gid", str(NOBODY)]
    for flags in ([*userns, *base], base):
        code, msg = _try(bwrap, flags)
        if code == 0:
            return _Profile(tuple(flags), "--size" in helptext)
    return _Profile(error=f"bubblewrap ({bwrap}) cannot create namespaces here (user "
                          f"namespaces disabled?): {msg}")


def _probe(bwrap: str) -> str | None:
    return _hardening(bwrap).error


def hardening(bwrap: str | None = None) -> tuple[str, ...]:
    """The flags :meth:`Sandbox.wrap` adds here (for the screen's detail line and tests)."""
    return _hardening(bwrap or bwrap_path() or "bwrap").flags


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


@functools.lru_cache(maxsize=1)
def _system() -> tuple[str, ...]:
    """The system folders bound into every sandbox (real folders, not the links to them)."""
    return tuple(d for d in SYSTEM_DIRS if os.path.isdir(d) and not os.path.islink(d))


def _devices() -> list[str]:
    """Binds of the host's accelerator nodes: character devices or folders of them only (a
    regular file or a link planted under /dev on the host is not a device)."""
    out: list[str] = []
    for pattern in DEVICE_GLOBS:
        for dev in sorted(glob.glob(pattern)):
            try:
                mode = os.lstat(dev).st_mode
            except OSError:
                continue
            if stat.S_ISCHR(mode) or stat.S_ISDIR(mode):
                out += ["--dev-bind-try", dev, dev]
    return out


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
    """A bubblewrap profile. The run sees the system (SYSTEM_DIRS), ``readable`` and the
    Python it uses read-only, ``writable`` (the run's cwd is always added) read-write, and
    nothing else. ``hidden``: directories covered by an empty read-only tmpfs where a bind
    would show them (a venv's folder inside the project), never shown by the Python's
    discovery; ``scratch``: an empty writable tmpfs that vanishes with the run (the home:
    tools keep caches there); ``network``: share the host's network."""

    hidden: tuple[str, ...] = ()
    scratch: tuple[str, ...] = ()
    writable: tuple[str, ...] = ()
    readable: tuple[str, ...] = ()  # re-exposed read-only (portside's probe)
    protected: tuple[str, ...] = ()  # hidden, and never re-exposed for PYTHONPATH (the project)
    network: bool = False
    bwrap: str = "bwrap"
    limits: Limits = field(default_factory=Limits)
    #: False: the profile before issue 24 (no user namespace, capabilities kept as root, no
    #: seccomp, unsized tmpfs): for the start-overhead benchmark's side-by-side only.
    hardened: bool = True

    @classmethod
    def for_project(cls, project: str | os.PathLike[str], *more: str | os.PathLike[str] | None,
                    network: bool = False, bwrap: str | None = None,
                    limits: Limits | None = None) -> Sandbox:
        """Hides the project, the git repo around it, the user's home and ``more`` (portside's
        work root)."""
        roots = _project_roots(project)
        hidden = (*roots, *(_real(m) for m in more if m))
        return cls(hidden=tuple(dict.fromkeys(hidden)), scratch=tuple(_homes()),
                   protected=tuple(roots), network=network, bwrap=bwrap or bwrap_path() or "bwrap",
                   limits=limits or Limits())

    def with_writable(self, *paths: str | os.PathLike[str]) -> Sandbox:
        return replace(self, writable=(*self.writable, *(_real(p) for p in paths)))

    def with_readable(self, *paths: str | os.PathLike[str]) -> Sandbox:
        return replace(self, readable=(*self.readable, *(_real(p) for p in paths)))

    def _hidden_all(self) -> list[str]:
        return [h for h in (*PRIVATE_DIRS, *self.scratch, *self.hidden) if h != "/"]

    def _is_hidden(self, path: str) -> bool:
        return any(_within(path, h) for h in self._hidden_all())

    def _exposable(self, path: str) -> bool:
        """Not shown by the system binds already (or under a hidden dir there), and not
        itself holding a hidden dir: never expose the project, the home or the work root,
        nor a folder around them that would show their neighbours (other tasks' projects)."""
        if not path or path == "/" or not os.path.exists(path):
            return False
        if any(_within(h, path) for h in self._hidden_all()):
            return False
        return self._is_hidden(path) or not any(_within(path, d) for d in _system())

    def agent_writable(self, cwd: str) -> list[str]:
        """Where the agent's code can write, now or in an earlier run: the run's cwd, the
        writable binds, and portside's work root (hidden dirs other than the project's),
        which holds every workspace and probe directory."""
        owned = [h for h in self.hidden if h not in self.protected]
        return list(dict.fromkeys((_real(cwd), *self.writable, *owned)))

    def readable_for(self, argv: Sequence[str], cwd: str, env: Mapping[str, str]) -> list[str]:
        """Paths of the Python(s) the command uses (prefixes, site-packages, PYTHONPATH's
        entries that are environments) that the hiding would otherwise take away. Nothing
        under :meth:`agent_writable` is run or read to find them (it could be anything)."""
        untrusted = tuple(self.agent_writable(cwd))
        paths: list[str] = []
        for interp in _interpreters(argv, cwd, env, untrusted):
            for p in _python_paths(interp, _key_env(env, untrusted)):
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

    def _profile(self) -> _Profile:
        return _hardening(self.bwrap) if self.hardened else _Profile()

    def _tmpfs(self, path: str, profile: _Profile) -> list[str]:
        if profile.sized and self.limits.tmp_size:
            return ["--size", str(self.limits.tmp_size), "--tmpfs", path]
        return ["--tmpfs", path]

    def wrap(self, argv: Sequence[str], cwd: str | os.PathLike[str],
             env: Mapping[str, str] | None = None, seccomp_fd: int | None = None) -> list[str]:
        """The bwrap argv that runs ``argv`` in ``cwd`` (read-write) inside the sandbox.
        ``seccomp_fd``: an open descriptor of the filter file that the caller passes to the
        child (``pass_fds``); without one the argv opens it itself (a ``sh`` in front)."""
        env = os.environ if env is None else env
        cwd_r = _real(cwd)
        profile = self._profile()
        flags = list(profile.flags)
        if "--seccomp" in flags:
            flags[flags.index("--seccomp") + 1] = str(SECCOMP_FD if seccomp_fd is None
                                                      else seccomp_fd)
        out = [self.bwrap, *flags, "--die-with-parent", "--new-session", "--unshare-pid",
               "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        if not self.network:
            out.append("--unshare-net")
        # An allow-list: the root is bubblewrap's empty tmpfs, made read-only last; only the
        # system, the Python, the probe and the run's own folders are bound into it.
        for d in SYSTEM_DIRS:
            if os.path.islink(d):
                out += ["--symlink", os.readlink(d), d]
            elif os.path.isdir(d):
                out += ["--ro-bind", d, d]
        out += ["--dev", "/dev", "--proc", "/proc"]
        out += _devices()
        # Parents before children, so a bind inside a hidden dir (the workspace inside the
        # work root) lands on top of it, and a hidden dir inside a bind (the project inside
        # the folder of a venv) covers what the bind showed; at one path the later kind wins.
        plan: list[tuple[str, int, list[str]]] = []
        shown = self.readable_for(argv, cwd_r, env)
        rw = list(dict.fromkeys((*self.writable, cwd_r)))
        if self.network:
            # /etc/resolv.conf often points into /run (systemd-resolved): keep DNS working.
            resolv = os.path.realpath("/etc/resolv.conf")
            if _within(resolv, "/run"):
                shown.append(os.path.dirname(resolv))
        binds = [*_system(), *shown, *rw]
        covered: list[str] = []
        for h in dict.fromkeys(self._hidden_all()):
            private = h in PRIVATE_DIRS or h in self.scratch
            # A hidden dir no bind shows is not there at all: nothing to cover.
            if not private and not any(_within(h, b) and h != b for b in binds):
                continue
            if private and os.path.islink(h):  # /var/run -> /run: the same private folder
                plan.append((h, 0, ["--symlink", os.readlink(h), h]))
            elif private or os.path.isdir(h) and not os.path.islink(h):
                plan.append((h, 0, self._tmpfs(h, profile)))
                if not private:
                    covered.append(h)
            elif os.path.lexists(h) and not os.path.islink(h):
                plan.append((h, 0, ["--ro-bind", "/dev/null", h]))
        plan += [(p, 1, ["--ro-bind-try", p, p]) for p in shown]
        plan += [(w, 2, ["--bind", w, w]) for w in rw]
        for _, _, args in sorted(plan, key=lambda m: (m[0].rstrip("/").count("/"), m[1])):
            out += args
        # Last: the mount points of the binds above had to be made in these first.
        for h in covered:
            out += ["--remount-ro", h]
        out += ["--remount-ro", "/dev", "--remount-ro", "/"]
        out += ["--setenv", "TMPDIR", "/tmp", "--chdir", cwd_r, "--", *argv]
        if seccomp_fd is None and "--seccomp" in flags:
            # The filter on SECCOMP_FD, opened by a shell that then becomes bwrap.
            return ["/bin/sh", "-c", f'exec "$@" {SECCOMP_FD}<"$0"', seccomp.filter_path(), *out]
        return out

    def wrap_command(self, command: str, cwd: str | os.PathLike[str],
                     env: Mapping[str, str] | None = None) -> str:
        """A shell command line that runs ``command`` (a shell string) in the sandbox: for
        commands an agent runs through a tool that takes a string (e.g. Claude Code's Bash).
        The seccomp filter reaches bwrap by a redirection of the line itself."""
        argv = self.wrap(["/bin/sh", "-c", command], cwd, env, seccomp_fd=SECCOMP_FD)
        if "--seccomp" not in argv:
            return shlex.join(argv)
        return f"{shlex.join(argv)} {SECCOMP_FD}< {shlex.quote(seccomp.filter_path())}"


# --- which Python a command uses ------------------------------------------------------------


def _key_env(env: Mapping[str, str], untrusted: Sequence[str] = ()
             ) -> tuple[tuple[str, str], ...]:
    """What the interpreter query sees of the run's environment: its PYTHONPATH without
    relative entries or entries the agent can write (a sitecustomize.py there would run)."""
    keep = ("PATH", "PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE", "HOME", "VIRTUAL_ENV")
    out = []
    for k in keep:
        if k not in env:
            continue
        v = env[k]
        if k == "PYTHONPATH":
            v = os.pathsep.join(p for p in v.split(os.pathsep)
                                if os.path.isabs(p) and not _untrusted(p, untrusted))
        out.append((k, v))
    return tuple(out)


def _untrusted(path: str, untrusted: Sequence[str]) -> bool:
    """Under a directory the agent can write (after links: a link out of it is the agent's
    choice of target, so the link's own place counts too)."""
    return any(_within(p, u) for p in (os.path.abspath(path), _real(path)) for u in untrusted)


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


def _interpreters(argv: Sequence[str], cwd: str, env: Mapping[str, str],
                  untrusted: Sequence[str] = ()) -> list[str]:
    """Python interpreters named in the command (``python``, a path to one, a script with a
    python shebang such as torchrun), plus python3/python on the run's PATH. A file under
    ``untrusted`` is never read nor kept, and neither is an interpreter its shebang names
    there: the agent wrote them."""
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
        if not exe or _untrusted(exe, untrusted):
            continue
        if not os.path.isfile(exe) or not os.access(exe, os.X_OK):
            continue
        if not _PYTHON.match(os.path.basename(exe)):
            interp = _shebang(exe)
            if interp is None:
                continue
            exe = interp if "/" in interp else (shutil.which(interp, path=path) or "")
            if not exe or _untrusted(exe, untrusted) or not _PYTHON.match(os.path.basename(exe)):
                continue
        found.append(os.path.abspath(exe))
    return list(dict.fromkeys(found))


@functools.lru_cache(maxsize=64)
def _python_paths(interp: str, env: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    """sys.prefix & co. and the site-packages of an interpreter, asked of it once."""
    try:
        # cwd "/": `-c` puts the cwd on sys.path, and portside's may be a workspace.
        proc = subprocess.run([interp, "-c", _QUERY], env=dict(env), capture_output=True,
                              timeout=30, stdin=subprocess.DEVNULL, cwd="/")
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


def limits_of(criteria: object) -> Limits:
    """A run's limits from criteria ``[sandbox]`` (a SandboxCriteria: its fractions of RAM)."""
    return Limits.from_fractions(getattr(criteria, "max_processes", 0),
                                 getattr(criteria, "max_memory_fraction", 0.0),
                                 getattr(criteria, "tmp_size_fraction", 0.0))


def _confined(sb: Sandbox) -> str:
    """What holds the run beyond the mounts, for the session's state line."""
    from portside.core.run.limits import mechanism

    flags = hardening(sb.bwrap)
    parts = ["no capabilities"]
    if "--unshare-user" in flags:
        parts.append("own user namespace")
    if "--seccomp" in flags:
        parts.append("seccomp filter")
    lim = sb.limits
    if lim.max_processes or lim.max_memory:
        parts.append(f"limits ({mechanism()}): {lim.describe()}")
    elif lim.tmp_size:
        parts.append(f"limits: {lim.describe()}")
    return ", ".join(parts)


def _readable_note(sb: Sandbox, readable: Sequence[str]) -> str:
    """What the state line says of ``[sandbox] readable``: the folders shown, and those not
    (missing, or holding the project, the home or portside's folders: never shown whole)."""
    if not readable:
        return ""
    shown = [p for p in readable if os.path.exists(p)
             and not any(_within(h, _real(p)) for h in sb._hidden_all())]
    refused = [p for p in readable if p not in shown]
    note = f" and {', '.join(shown)}" if shown else ""
    if refused:
        note += (f" (not {', '.join(refused)}: missing, or holding the project, the home "
                 "or portside's folders)")
    return note


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
                    withheld: Sequence[str] = (), limits: Limits | None = None,
                    readable: Sequence[str] = ()) -> Confinement:
    """The sandbox of an agent session's runs (references and candidates alike, so both run
    in the same world). ``wanted`` False: the user said --no-sandbox. ``limits``: each run's
    (criteria ``[sandbox]``, see :func:`limits_of`); ``readable``: host folders the runs may
    read besides (criteria ``[sandbox] readable``: data sets)."""
    kept = ""
    if withheld:
        names = ", ".join(withheld[:5]) + (f" and {len(withheld) - 5} more" if len(withheld) > 5
                                           else "")
        kept = f"; secret-looking files not copied: {names} ([sandbox] secrets = true to copy)"
    reason = unavailable() if wanted else "turned off with --no-sandbox"
    if reason is None:
        sb = Sandbox.for_project(project, work_root, network=network,
                                 limits=limits).with_writable(*writable)
        net = "network on" if network else "no network"
        extra = _readable_note(sb, readable)
        sb = sb.with_readable(*readable)
        return Confinement(sb, "sandboxed", f"runs in bubblewrap: they see the system, their "
                                            f"Python and the workspace{extra}, project and "
                                            f"home hidden, only the workspace writable, {net}, "
                                            f"{_confined(sb)}{kept}")
    refused = auto_refusal(policy, has_agent, not wanted)
    return Confinement(None, "unsandboxed", f"runs are NOT sandboxed: {reason}; the agent's "
                                            f"code runs as you{kept}", refused)
