"""The `portside` command as the tests call it: one helper, one argument order.

``cli(*args, db=...)`` runs it in a process of its own, as a user would (integration tests);
``cli_in_process(*args, db=...)`` runs the same click command in this process (no process start,
no torch import: the unit tier's way). Both return a CompletedProcess; ``--db`` goes first.
``cli_argv`` and ``cli_line`` are the same command for a caller that starts it its own way (a
pty, a measure of its memory, a process killed and resumed; a terminal's shell line in tmux).
``clean_env`` and ``small_files`` are what the tests give such a process: an environment without
this shell's portside settings, a limit on its files' size.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any


def _argv(args: tuple[str, ...], db: Path | None) -> list[str]:
    return (["--db", str(db)] if db is not None else []) + list(args)


def cli_argv(*args: str, db: Path | None = None) -> list[str]:
    return [sys.executable, "-m", "portside.cli", *_argv(args, db)]


def cli_line(*args: str, db: Path | None = None) -> str:
    """One shell line, each word quoted."""
    return shlex.join(cli_argv(*args, db=db))


def clean_env(threads: int = 2) -> dict[str, str]:
    """This environment without portside's own variables (a PORTSIDE_DB or PORTSIDE_XLA_PYTHON
    of the shell must not reach the command), and ``threads`` intra-op threads for its runs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PORTSIDE_")}
    env["OMP_NUM_THREADS"] = str(threads)
    return env


def small_files() -> None:
    """A ``preexec_fn``: the process's files may not grow past 2 MB; writes beyond fail (EFBIG),
    as on a full disk, instead of killing it (SIGXFSZ ignored)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (2 << 20, 2 << 20))


def cli(*args: str, db: Path | None = None, cwd: Path | None = None,
        env: Mapping[str, str] | None = None, timeout: float = 300,
        stdin: str | None = None, **kw: Any) -> subprocess.CompletedProcess[str]:
    """``kw`` goes to subprocess.run (``preexec_fn`` for a limit on the process, ``text=False``
    for the output's raw bytes)."""
    kw = {"capture_output": True, "text": True, **kw}
    return subprocess.run(cli_argv(*args, db=db), timeout=timeout, cwd=cwd,
                          env=dict(env) if env is not None else None, input=stdin, **kw)


def cli_popen(*args: str, db: Path | None = None, cwd: Path | None = None,
              env: Mapping[str, str] | None = None, **kw: Any) -> subprocess.Popen[str]:
    """Its output piped as text unless ``kw`` says otherwise (``stdout=subprocess.DEVNULL``
    for a process the test only kills)."""
    kw = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True, **kw}
    return subprocess.Popen(cli_argv(*args, db=db), cwd=cwd,
                            env=dict(env) if env is not None else None, **kw)


@contextlib.contextmanager
def _cwd(path: Path | None) -> Iterator[None]:
    old = os.getcwd()
    if path is not None:
        os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def cli_in_process(*args: str, db: Path | None = None,
                   cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    from click.testing import CliRunner

    from portside.cli.main import main

    with _cwd(cwd):
        res = CliRunner().invoke(main, _argv(args, db), catch_exceptions=False)
    return subprocess.CompletedProcess(["portside", *_argv(args, db)], res.exit_code,
                                       res.stdout, res.stderr)
