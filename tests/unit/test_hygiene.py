"""Import hygiene: the core and the store never pull in Textual; no bare core/store/tui."""

from __future__ import annotations

import subprocess
import sys


def _run(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd="/").stdout.strip()


def test_core_and_store_do_not_import_textual() -> None:
    out = _run(
        "import sys, portside.core, portside.core.events, portside.core.render, portside.store, "
        "portside.store.jsonl; print(sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('textual', 'torch', 'anthropic')))"
    )
    assert out == "[]"


def test_cli_help_does_not_import_textual() -> None:
    out = _run(
        "import sys; from click.testing import CliRunner; from portside.tui.cli import main; "
        "r = CliRunner().invoke(main, ['--help']); assert r.exit_code == 0; "
        "print('textual' in sys.modules)"
    )
    assert out == "False"


def test_no_bare_packages_are_importable() -> None:
    out = _run(
        "import importlib.util as u; print([n for n in ('core', 'store', 'tui') "
        "if u.find_spec(n) is not None])"
    )
    assert out == "[]"
