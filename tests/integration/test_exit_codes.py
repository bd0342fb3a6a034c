"""The exit-code table (cli/exit_codes.py, shown in the README) is true: every status it lists
for a command is the status that command exits with, through the real CLI in a subprocess;
and usage errors exit 2 in every command (several exited 1 before)."""

from __future__ import annotations

import json
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_run import clean_env, cli_popen, small_files

from portside.cli.exit_codes import NONE, STATUSES, TABLE, markdown

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "fixtures" / "trainers" / "train_tiny.py"
RECORDING = REPO / "sessions" / "recordings" / "demo.jsonl"
LOCALIZE = REPO / "tests" / "localize" / "scripts" / "train.py"
PY = sys.executable
SLEEPER = f"{PY} -c \"import time; print('step=1 loss=1.0', flush=True); time.sleep(120)\""


def _sigint_as_at_a_terminal() -> None:
    # A suite started in the background (`make test &`) passes SIGINT on ignored, and Python
    # then never raises KeyboardInterrupt: the Ctrl-C rows would wait out their timeout.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _cli(tmp: Path, *args: str, **kw: Any) -> subprocess.Popen[str]:
    theirs = kw.pop("preexec_fn", None)  # e.g. a file-size limit for the recording-failed rows

    def before_exec() -> None:
        _sigint_as_at_a_terminal()
        if theirs is not None:
            theirs()

    return cli_popen(*args, db=tmp / "p.db", cwd=tmp, env=clean_env(), preexec_fn=before_exec, **kw)


def _exit(proc: subprocess.Popen[str], timeout: float = 300) -> tuple[int, str]:
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err


def _ran(tmp: Path, *args: str, **kw: Any) -> tuple[int, str]:
    return _exit(_cli(tmp, *args, **kw))


def _when_running(tmp: Path, sig: int, *args: str) -> tuple[int, str]:
    """Start the command, send ``sig`` once its first run has started (in the log)."""
    proc = _cli(tmp, *args)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if _has_run(tmp / "p.db"):
            break
        time.sleep(0.2)
    time.sleep(0.5)
    proc.send_signal(sig)
    return _exit(proc, 120)


def _has_run(db: Path) -> bool:
    if not db.exists():
        return False
    conn = sqlite3.connect(db)
    try:
        return bool(conn.execute("SELECT 1 FROM events WHERE kind = 'run.started'").fetchone())
    except sqlite3.OperationalError:
        return False
    finally:
        conn.close()


def _after_a_line(tmp: Path, sig: int, *args: str) -> tuple[int, str]:
    """Start the command, send ``sig`` once it has printed a line on stdout."""
    proc = _cli(tmp, *args)
    assert proc.stdout is not None
    proc.stdout.readline()
    time.sleep(0.3)
    proc.send_signal(sig)
    return _exit(proc, 60)


def _attach(tmp: Path, hooks: tuple[str, ...], *args: str, signal_at_run: int = 0,
            **kw: Any) -> tuple[int, str]:
    """`portside attach` on a project of the tiny trainer, then the hooks the user's Claude
    Code would fire (SessionStart, Stop, SessionEnd), each through the command portside wrote
    into the project's settings (the real hook client), once attach says it is hooked."""
    project = tmp / "proj"
    project.mkdir()
    shutil.copy(TINY, project / "train.py")
    # The project's own copy: the sandbox hides /tmp, where a checkout may lie (a CI clone).
    proc = _cli(tmp, "attach", str(project), "--reference", f"{PY} train.py --steps 30",
                "--reference-runs", "1",
                "--headless", *args, **kw)
    assert proc.stderr is not None
    err: list[str] = []
    for line in proc.stderr:
        err.append(line)
        if signal_at_run and _has_run(tmp / "p.db"):
            time.sleep(0.5)
            proc.send_signal(signal_at_run)
            break
        if "portside attach: hooks in" in line:
            break
    settings = json.loads((project / ".claude" / "settings.local.json").read_text()) \
        if not signal_at_run and proc.poll() is None else {"hooks": {}}
    for name in hooks:
        command = settings["hooks"][name][0]["hooks"][0]["command"]
        body = {"hook_event_name": name, "session_id": "cc-1", "cwd": str(project),
                "source": "startup", "reason": "exit",
                "last_assistant_message": "Ported train.py; it trains as before."}
        subprocess.run(command, shell=True, input=json.dumps(body), text=True,
                       capture_output=True, timeout=300, check=True)
    code, rest = _exit(proc)
    return code, "".join(err) + rest


def _flood(tmp: Path) -> str:
    (tmp / "flood.py").write_text("while True:\n    print('x' * 200)\n")
    return f"{PY} flood.py"


def _imported(tmp: Path) -> None:
    code, err = _ran(tmp, "import", str(RECORDING))
    assert code == 0, err


TRAIN = f"{PY} {TINY} --steps 30"
CRASH = f"{PY} {TINY} --steps 30 --raise-at 3"
VERIFY = ("verify", "--reference", TRAIN, "--target", "cpu", "--reference-runs", "1",
          "--timeout", "120")
RUN = ("run", "--headless", "--policy", "auto", "--reference", TRAIN, "--target", "cpu",
       "--reference-runs", "1", "--timeout", "120")

Case = Callable[[Path], tuple[int, str]]
# (the table's command cell, status) -> how to make that command exit with it
CASES: dict[tuple[str, str], Case] = {
    ("`verify`", "0"): lambda t: _ran(t, *VERIFY, "--candidate", TRAIN),
    ("`verify`", "1"): lambda t: _ran(t, *VERIFY, "--candidate", CRASH),
    ("`verify`", "2"): lambda t: _ran(t, *VERIFY, "--candidate", TRAIN, "--stall", "nan"),
    ("`verify`", "3"): lambda t: _ran(t, "verify", "--reference", _flood(t), "--candidate",
                                      _flood(t), "--target", "cpu", "--reference-runs", "1",
                                      preexec_fn=small_files),
    ("`verify`", "128+N"): lambda t: _when_running(t, signal.SIGTERM, "verify", "--reference",
                                                   SLEEPER, "--candidate", SLEEPER,
                                                   "--target", "cpu", "--reference-runs", "1"),
    ("`run`, `demo`", "0"): lambda t: _ran(t, *RUN, "--candidate", TRAIN),
    ("`run`, `demo`", "1"): lambda t: _ran(t, *RUN, "--candidate", CRASH),
    ("`run`, `demo`", "2"): lambda t: _ran(t, "run", "--target", "cpu", "--reference", ""),
    ("`run`, `demo`", "3"): lambda t: _ran(t, "run", "--headless", "--policy", "auto",
                                           "--reference", _flood(t), "--target", "cpu",
                                           "--reference-runs", "1", preexec_fn=small_files),
    ("`run`, `demo`", "128+N"): lambda t: _when_running(t, signal.SIGHUP, "run", "--headless",
                                                        "--policy", "auto", "--reference",
                                                        SLEEPER, "--target", "cpu",
                                                        "--reference-runs", "1"),
    ("`attach`", "0"): lambda t: _attach(t, ("SessionStart", "Stop", "SessionEnd")),
    ("`attach`", "1"): lambda t: _attach(t, ("SessionStart", "SessionEnd")),
    ("`attach`", "2"): lambda t: (
        (t / "proj" / ".claude").mkdir(parents=True),
        (t / "proj" / ".claude" / "settings.local.json").write_text("[]\n"),
        _ran(t, "attach", str(t / "proj"), "--reference", TRAIN, "--headless"))[2],
    ("`attach`", "3"): lambda t: _ran(t, "attach", str(t), "--reference", _flood(t),
                                      "--reference-runs", "1", "--headless",
                                      preexec_fn=small_files),
    ("`attach`", "128+N"): lambda t: _attach(t, (), signal_at_run=signal.SIGTERM),
    ("`localize`", "0"): lambda t: _ran(t, "localize", "--reference", f"{PY} {LOCALIZE}",
                                        "--candidate", f"{PY} {LOCALIZE} --threads 1",
                                        "--steps", "1"),
    ("`localize`", "1"): lambda t: _ran(t, "localize", "--reference", f"{PY} {LOCALIZE}",
                                        "--candidate", f"{PY} {LOCALIZE} --label-smoothing 0.1",
                                        "--steps", "1"),
    ("`localize`", "2"): lambda t: _ran(t, "localize", "--reference", "x", "--candidate", "y",
                                        "--timeout", "inf"),
    ("`scan`", "0"): lambda t: ((t / "clean.py").write_text("import torch\nx = torch.ones(2)\n"),
                                _ran(t, "scan", str(t / "clean.py")))[1],
    ("`scan`", "1"): lambda t: _ran(t, "scan", str(REPO / "tests" / "fixtures" / "scan" / "mnist")),
    ("`scan`", "2"): lambda t: _ran(t, "scan", str(t / "nosuch")),
    ("`export`", "0"): lambda t: (_imported(t), _ran(t, "export", "last", "-o", "x.jsonl"))[1],
    ("`export`", "1"): lambda t: (_imported(t), _ran(t, "export", "last", "-o",
                                                     str(t / "missing" / "x.jsonl")))[1],
    ("`export`", "2"): lambda t: _ran(t, "export", "nosuch"),
    ("`replay`", "0"): lambda t: _ran(t, "replay", str(RECORDING), "--headless", "--speed", "0"),
    ("`replay`", "2"): lambda t: _ran(t, "replay", "nosuch", "--headless"),
    ("`replay`", "128+N"): lambda t: _after_a_line(t, signal.SIGINT, "replay", str(RECORDING),
                                                   "--headless", "--idle-limit", "0"),
    ("`import`, `show`, `stats`, `sessions`", "0"): lambda t: _ran(t, "import", str(RECORDING)),
    ("`import`, `show`, `stats`, `sessions`", "2"): lambda t: _ran(t, "show", "nosuch"),
    ("`serve`", "0"): lambda t: _after_a_line(t, signal.SIGTERM, "serve", "replay",
                                              str(RECORDING)),
    ("`serve`", "2"): lambda t: _ran(t, "serve", "export", "last"),
}


def _cells() -> list[tuple[str, str, str]]:
    return [(cmd, status, meaning) for cmd, row in TABLE
            for status, meaning in zip(STATUSES, row, strict=True) if meaning != NONE]


def _params() -> list[Any]:
    """Each cell; those that train (or trace) for real are slow."""
    trains = ("`verify`", "`run`, `demo`", "`localize`", "`attach`")
    return [pytest.param(c, s, m, id=f"{c.strip('`').split('`')[0]}-{s}",
                         marks=[pytest.mark.slow] if c in trains and s != "2" else [])
            for c, s, m in _cells()]


def test_every_listed_status_has_its_check() -> None:
    assert {(c, s) for c, s, _ in _cells()} == set(CASES)


@pytest.mark.parametrize(("command", "status", "meaning"), _params())
def test_the_command_exits_with_the_listed_status(tmp_path: Path, command: str, status: str,
                                                  meaning: str) -> None:
    code, err = CASES[(command, status)](tmp_path)
    if status == "128+N":
        assert code > 128, (meaning, code, err[-2000:])
    else:
        assert code == int(status), (meaning, code, err[-2000:])
    assert "Traceback" not in err, err[-2000:]


def test_the_cli_reference_holds_the_table_verbatim() -> None:
    """docs/cli.md (generated by cli/reference.py) shows ``markdown()``: kept in step."""
    assert markdown() in (REPO / "docs" / "cli.md").read_text(encoding="utf-8")


# Usage errors that exited 1 before (click's own exit 2 for a bad option was the rest).
USAGE_ERRORS = [
    ["show", "nosuch"],
    ["show", "\udcff\udcfe"],
    ["export", "nosuch"],
    ["export"],
    ["export", "last", "--what", "events", "--format", "csv"],
    ["replay", "nosuch", "--headless"],
    ["replay", str(RECORDING), "--headless", "--from", "bogus"],
    ["replay", str(RECORDING), "--headless", "--speed", "-1"],
    ["stats", "--since", "yesterday"],
    ["run", "--resume", "nosuch", "--headless"],
    ["run", "--resume", "\udcff\udcfe", "--headless"],
    ["verify", "--reference", "x", "--candidate", "y", "--target", "cpu", "--session",
     "\udcff\udcfe"],
    ["serve", "--port", "{busy}", "replay", "last"],
]


@pytest.mark.parametrize("args", USAGE_ERRORS, ids=lambda a: "-".join(a)[:40])
def test_usage_errors_exit_2_everywhere(tmp_path: Path, args: list[str]) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        args = [a.replace("{busy}", str(busy.getsockname()[1])) for a in args]
        code, err = _ran(tmp_path, *args)
    assert code == 2, (args, err[-2000:])
    assert "Traceback" not in err and err.strip(), err[-2000:]


def test_a_bad_input_file_is_a_usage_error(tmp_path: Path) -> None:
    """A malformed recording (as a malformed Claude Code transcript already did) and a --db
    that is no database: exit 2, naming the file."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    for what in (["import", str(bad)], ["import", "--claude-code", str(bad)],
                 ["replay", str(bad), "--headless"], ["--db", str(bad), "show", "last"]):
        code, err = _ran(tmp_path, *what)
        assert code == 2 and str(bad) in err, (what, err)
