"""Import hygiene: the core and the store never pull in Textual; no bare core/store/tui."""

from __future__ import annotations

import subprocess
import sys


def _run(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd="/").stdout.strip()


def test_core_and_store_do_not_import_textual() -> None:
    out = _run(
        "import sys, portside.core, portside.core.log.events, portside.core.log.render, portside.store, "
        "portside.store.jsonl; print(sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('textual', 'torch', 'anthropic')))"
    )
    assert out == "[]"


def test_no_core_or_store_module_imports_textual() -> None:
    out = _run(
        "import sys, pkgutil, importlib, portside.core, portside.store\n"
        "for pkg in (portside.core, portside.store):\n"
        "    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "        if '._probe' in m.name or m.name.endswith('.__main__'):\n"
        "            continue\n"
        "        importlib.import_module(m.name)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'textual'))"
    )
    assert out == "[]"


def test_cli_help_does_not_import_textual() -> None:
    out = _run(
        "import sys; from click.testing import CliRunner; from portside.cli.main import main; "
        "r = CliRunner().invoke(main, ['--help']); assert r.exit_code == 0; "
        "print('textual' in sys.modules)"
    )
    assert out == "False"


def test_no_bare_packages_are_importable() -> None:
    out = _run(
        "import importlib.util as u; print([n for n in ('core', 'store', 'tui', 'cli') "
        "if u.find_spec(n) is not None])"
    )
    assert out == "[]"


def test_the_cli_is_a_room_of_its_own() -> None:
    """The command line lives in cli/; the Textual room holds no click code."""
    from pathlib import Path

    tui = Path(__file__).resolve().parents[2] / "tui"
    offenders = [str(p) for p in tui.rglob("*.py") if "import click" in p.read_text()]
    assert offenders == []


def test_one_builder_of_alarm_raised() -> None:
    """Every alarm goes through checks.Alarm (its kind checked against KINDS) and
    Alarm.raised: no module builds the event by hand."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    builders = [str(p.relative_to(root)) for d in ("core", "cli", "store", "tui")
                for p in (root / d).rglob("*.py")
                if re.search(r"\bAlarmRaised\(\s*session_id", p.read_text())]
    assert builders == ["core/checks/alarms.py"]
