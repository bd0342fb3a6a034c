"""portside's exit statuses: the constants the commands use, and the one table of them (command
× status) that the README shows. tests/unit/test_exit_codes.py makes each listed command exit
with each listed status, and checks that README.md holds ``markdown()`` verbatim.

A usage error is anything wrong with what was asked, found before the work starts: an option
or value, a session that does not exist, an input file that is not what it should be. It exits
2 in every command; 1 is a command's own "no" (a verdict other than pass, a divergence found)
or an output that could not be written.
"""

from __future__ import annotations

import click

OK = 0
FAIL = 1
USAGE = 2
RECORDING_FAILED = 3
SIGNALLED = 128  # + the signal's number: 130 Ctrl-C, 129 SIGHUP, 143 SIGTERM

STATUSES = ("0", "1", "2", "3", "128+N")
_USAGE = "usage error"
_SIGNAL = "ended by signal N: runs killed, session recorded"
NONE = "—"

# (command(s), the meaning of each status in STATUSES; NONE: never exits with it)
TABLE: tuple[tuple[str, tuple[str, str, str, str, str]], ...] = (
    ("`verify`", ("pass", "fail (any verdict but pass)", _USAGE, "recording failed", _SIGNAL)),
    ("`run`, `demo`", ("pass", "fail, or closed before a verdict", _USAGE, "recording failed",
                       _SIGNAL)),
    ("`attach`", ("pass", "fail, or closed before a verdict",
                  _USAGE + " (also: a settings file it cannot merge into)", "recording failed",
                  _SIGNAL)),
    ("`localize`", ("no divergence", "a divergence found", "usage error, or could not trace",
                    NONE, NONE)),
    ("`scan`", ("nothing found", "findings", _USAGE, NONE, NONE)),
    ("`export`", ("written", "the output could not be written", _USAGE, NONE, NONE)),
    ("`replay`", ("played to the end", NONE, _USAGE, NONE, "130: Ctrl-C")),
    ("`import`, `show`, `stats`, `sessions`", ("done", NONE, _USAGE, NONE, NONE)),
    ("`serve`", ("stopped (Ctrl-C, SIGTERM)", NONE, _USAGE + " (also: --port in use)", NONE,
                 NONE)),
)


def markdown() -> str:
    """The table as README Markdown."""
    lines = ["| command | " + " | ".join(f"exit {s}" for s in STATUSES) + " |",
             "| --- |" + " --- |" * len(STATUSES)]
    lines += [f"| {cmd} | " + " | ".join(cells) + " |" for cmd, cells in TABLE]
    return "\n".join(lines) + "\n"


class UsageFailure(click.ClickException):
    """``Error: <message>`` on stderr and exit 2, without click's usage banner: a usage error
    that is about a value (a session, a file's content) rather than the command's syntax."""

    exit_code = USAGE


if __name__ == "__main__":
    print(markdown(), end="")
