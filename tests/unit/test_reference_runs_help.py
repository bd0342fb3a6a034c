"""`--reference-runs --help` says the second reference runs with shifted seeds (by design; the
README and help never said so). Ground truth: core/session/verify.py gives reference #n seed offset n-1."""

from __future__ import annotations

import inspect

from click.testing import CliRunner

from portside.cli.main import main
from portside.core.session import verify


def test_help_says_references_shift_seeds() -> None:
    assert '"reference", n, command, cwd, target, n - 1' in inspect.getsource(verify)
    for cmd in ("run", "verify"):
        out = " ".join(CliRunner().invoke(main, [cmd, "--help"]).output.split())
        assert "Run #n shifts the seeds" in out and "by n-1" in out, out
