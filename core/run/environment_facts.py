"""What in a run's environment decides its result, as facts a key can be made of: the
interpreter the command runs and its packages' versions, the accelerators this machine shows,
the variables the run sees. Read here (or over SSH, on a reference host) before a reference
runs, so that a stored reference is reused only where all of them are the same
(core/session/reference_reuse.py).

The interpreter is the one the command names (``python``, ``python3.11``, a script whose
``#!`` names one, ``torchrun``'s), found on the PATH the run gets; where the command names
none, the ``python3`` on that PATH. Its packages are listed by that interpreter itself
(``importlib.metadata``), once: the list is kept, in memory and in a cache file, until the
interpreter or one of its site-packages folders changes (a package installed or removed
changes its folder's mtime).
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from portside.core.safety.secrets import MASK, is_secret

__all__ = ["accelerator_facts", "command_interpreter", "host_variables", "interpreter_facts",
           "remote_facts", "run_variables"]

FACTS_TIMEOUT_S = 60.0

# Run by the interpreter itself: its identity and every distribution it can import.
LIST_PACKAGES = r"""
import importlib.metadata as md, json, site, sys, sysconfig
paths = sorted({p for p in [*site.getsitepackages(), site.getusersitepackages(),
                            sysconfig.get_paths().get("purelib", ""),
                            sysconfig.get_paths().get("platlib", "")] if p})
dists = sorted({(d.metadata.get("Name") or "?", d.version or "?") for d in md.distributions()})
print(json.dumps({"executable": sys.executable, "version": sys.version,
                  "implementation": sys.implementation.name, "prefix": sys.prefix,
                  "site_packages": paths, "packages": dists}))
"""

# Variables that say where and how the user's shell runs, not what the run computes: left out,
# so a second terminal (another tmux pane, ssh session, pytest phase) keys the same.
VOLATILE = frozenset({
    "PWD", "OLDPWD", "SHLVL", "_", "TERM", "COLORTERM", "TERM_PROGRAM", "TERM_PROGRAM_VERSION",
    "TERM_SESSION_ID", "TMUX", "TMUX_PANE", "STY", "WINDOW", "WINDOWID", "DISPLAY",
    "WAYLAND_DISPLAY", "XDG_SESSION_ID", "XDG_SESSION_TYPE", "XDG_SESSION_CLASS", "XDG_VTNR",
    "XDG_SEAT", "SSH_CLIENT", "SSH_CONNECTION", "SSH_TTY", "GPG_TTY", "LS_COLORS", "COLUMNS",
    "LINES", "INVOCATION_ID", "JOURNAL_STREAM", "MAIL", "PS1", "PS2", "PROMPT_COMMAND",
    "HISTFILE", "HISTSIZE", "HISTFILESIZE", "HISTCONTROL", "DBUS_SESSION_BUS_ADDRESS",
    "PYTEST_CURRENT_TEST", "PORTSIDE_DB", "LESSOPEN", "LESSCLOSE", "MOTD_SHOWN",
    # A study's worker on a Ray node: which node, raylet and job it is (new each cluster).
    "PORTSIDE_STUDY_NODE", "RAY_RAYLET_PID", "RAY_JOB_ID",
})
VOLATILE_PREFIXES = ("VSCODE_", "TERMINAL_", "KONSOLE_", "ITERM_", "WT_", "LC_TERMINAL")

_ASSIGNMENT = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_PYTHON = re.compile(r"python[0-9.]*$")
_WRAPPERS = frozenset({"env", "exec", "nice", "nohup", "time", "stdbuf", "taskset", "numactl"})


def run_variables(env: Mapping[str, str]) -> dict[str, str]:
    """The variables a run of ``env`` sees that can change what it computes: the shell's own
    left out, secrets masked the way core/safety masks them (a run never sees them: the
    runner scrubs them; masked, a rotated token keys the same)."""
    out: dict[str, str] = {}
    for k, v in env.items():
        if k in VOLATILE or k.startswith(VOLATILE_PREFIXES):
            continue
        out[k] = MASK if is_secret(k, v) else v
    if "PATH" in out:  # a folder named twice finds nothing the first did not: the same PATH
        out["PATH"] = os.pathsep.join(dict.fromkeys(out["PATH"].split(os.pathsep)))
    return dict(sorted(out.items()))


_SEPARATORS = frozenset({";", "&&", "||", "|", "&", "(", ")", "\n"})


def _programs(command: str) -> list[str]:
    """The words of a shell command in a program's place: first, and after ; && || | &."""
    lex = shlex.shlex(command, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    try:
        words = list(lex)
    except ValueError:
        return []
    out: list[str] = []
    at_start = True
    for w in words:
        if w in _SEPARATORS:
            at_start = True
            continue
        if not at_start:
            continue
        name, eq, _ = w.partition("=")
        if eq and name and set(name) <= _ASSIGNMENT and not name[0].isdigit():
            continue  # VAR=value before the program
        if w in _WRAPPERS or w.startswith("-"):
            continue
        out.append(w)
        at_start = False
    return out


def _shebang_python(path: str) -> str | None:
    with contextlib.suppress(OSError):
        with open(path, "rb") as f:
            head = f.read(256)
        if head.startswith(b"#!"):
            line = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()
            if line and os.path.basename(line[0]) == "env" and len(line) > 1:
                line = line[1:]
            if line and os.path.basename(line[0]).startswith("python"):
                return line[0]
    return None


def command_interpreter(command: str, env: Mapping[str, str]) -> str | None:
    """The Python the command runs, found on the run's PATH (see the module's note); None
    where there is none."""
    path = env.get("PATH", os.defpath)
    for prog in _programs(command):  # `cd x && python t.py`, `echo >> f; python t.py`
        found = shutil.which(prog, path=path)
        if found is None:
            continue
        if _PYTHON.match(os.path.basename(found)):
            return found
        script = _shebang_python(found)  # torchrun, accelerate: scripts of an interpreter
        if script is not None:
            return script if os.path.isabs(script) else shutil.which(script, path=path)
    return shutil.which("python3", path=path) or shutil.which("python", path=path)


def _stamp(paths: list[str]) -> list[list[Any]]:
    out: list[list[Any]] = []
    for p in paths:
        try:
            out.append([p, os.stat(p).st_mtime_ns])
        except OSError:
            out.append([p, None])
    return out


_MEMO: dict[str, dict[str, Any]] = {}


def interpreter_facts(interpreter: str, cache_file: Path | None = None) -> dict[str, Any]:
    """{executable, version, implementation, prefix, packages: [[name, version], ...]} of
    that interpreter; from the cache while the interpreter's file and its site-packages
    folders keep their mtimes, else listed by it (a subprocess, FACTS_TIMEOUT_S at most).
    Raises OSError (or subprocess.SubprocessError) when it cannot be listed."""
    real = os.path.realpath(interpreter)
    cached = _MEMO.get(interpreter)
    if cached is None and cache_file is not None:
        with contextlib.suppress(OSError, ValueError):
            cached = json.loads(cache_file.read_text(encoding="utf-8")).get(interpreter)
    if isinstance(cached, dict) and cached.get("stamp") == _stamp(
            [real, *cached.get("facts", {}).get("site_packages", [])]):
        _MEMO[interpreter] = cached
        return dict(cached["facts"])
    # -E and cwd "/": no PYTHON* variable and no project module (a json.py) in the way; the
    # run's PYTHONPATH is in its variables' part of the key.
    done = subprocess.run([interpreter, "-E", "-c", LIST_PACKAGES], capture_output=True,
                          text=True, timeout=FACTS_TIMEOUT_S, stdin=subprocess.DEVNULL,
                          env={"PATH": os.defpath, "HOME": os.path.expanduser("~")}, cwd="/")
    if done.returncode != 0:
        raise OSError(f"{interpreter} could not list its packages: {done.stderr.strip()[-300:]}")
    facts = json.loads(done.stdout)
    entry = {"stamp": _stamp([real, *facts.get("site_packages", [])]), "facts": facts}
    _MEMO[interpreter] = entry
    if cache_file is not None:
        with contextlib.suppress(OSError, ValueError):
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            try:
                every = json.loads(cache_file.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                every = {}
            every[interpreter] = entry
            tmp = cache_file.with_name(f".{cache_file.name}.{os.getpid()}")
            tmp.write_text(json.dumps(every), encoding="utf-8")
            os.replace(tmp, cache_file)
    return dict(facts)


def _read_first_line(path: str) -> str:
    with contextlib.suppress(OSError, UnicodeDecodeError), open(path, encoding="utf-8") as f:
        return f.readline().strip()
    return ""


def accelerator_facts() -> dict[str, Any]:
    """The accelerators this machine shows a run: device nodes by driver (as core/run/observe.py
    tells hardware apart) and the NVIDIA driver's version; the host and its kernel."""
    nodes: list[str] = []
    with contextlib.suppress(OSError):
        nodes = sorted(n for n in os.listdir("/dev")
                       if n.startswith(("nvidia", "accel", "dri", "kfd")))
    with contextlib.suppress(OSError):
        nodes += sorted(f"vfio/{n}" for n in os.listdir("/dev/vfio"))
    u = platform.uname()
    return {"devices": nodes, "nvidia": _read_first_line("/proc/driver/nvidia/version"),
            "host": u.node, "system": u.system, "machine": u.machine}


# On a reference host: the same facts, then the variables its login gives a run (sshd's, its
# shell's rc files), read there by the command's Python in one ssh call.
REMOTE_ACCELERATORS = r"""
import os, platform
nodes = []
try:
    nodes = sorted(n for n in os.listdir("/dev") if n.startswith(("nvidia", "accel", "dri", "kfd")))
    nodes += sorted("vfio/" + n for n in os.listdir("/dev/vfio"))
except OSError:
    pass
try:
    nvidia = open("/proc/driver/nvidia/version").readline().strip()
except OSError:
    nvidia = ""
u = platform.uname()
print(json.dumps({"devices": nodes, "nvidia": nvidia, "host": u.node, "system": u.system,
                  "machine": u.machine}))
print(json.dumps(dict(os.environ)))
"""


def host_variables(env: Mapping[str, str]) -> dict[str, str]:
    """The variables a host's own login gives its runs (sshd's, its shell's rc files: a
    run there sees them beside what portside sends), as run_variables keys them; those
    that describe the connection (``SSH_*``) left out."""
    return run_variables({k: v for k, v in env.items() if not k.startswith("SSH_")})


async def remote_facts(executor: Any, command: str) -> list[Any]:
    """The interpreter and accelerator facts of each host an SSH executor (or a slice of them)
    runs on, and the variables its login sets (host_variables), read there. Raises OSError
    when a host does not answer them."""
    import asyncio

    from portside.core.run.ssh import ssh_argv

    python = next((p for p in _programs(command) if _PYTHON.match(os.path.basename(p))),
                  "python3")
    out: list[Any] = []
    for one in getattr(executor, "executors", None) or [executor]:
        remote = f"cd / && {shlex.quote(python)} -E -c {shlex.quote(LIST_PACKAGES + REMOTE_ACCELERATORS)}"
        proc = await asyncio.create_subprocess_exec(
            *ssh_argv(one.host, remote, one.config), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            got, err = await asyncio.wait_for(proc.communicate(), FACTS_TIMEOUT_S)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise OSError(f"{one.label}: the host's facts took over {FACTS_TIMEOUT_S:g} s") from None
        if proc.returncode != 0:
            raise OSError(f"{one.label}: could not read the host's facts: "
                          f"{err.decode('utf-8', 'replace').strip()[-300:]}")
        # The last lines: a login that prints (a banner in ~/.bashrc) comes before them.
        lines = got.decode("utf-8", "replace").strip().splitlines()
        if len(lines) < 3:
            raise OSError(f"{one.label}: the host's facts came back incomplete")
        interpreter, accelerators, variables = (json.loads(line) for line in lines[-3:])
        out.append([one.label, interpreter, accelerators, host_variables(variables)])
    return out
