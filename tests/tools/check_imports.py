"""Every portside import in the tree names a module, and a name in it, that exists (lazy ones
inside functions too, which an import of the module never runs and mypy does not check in an
unannotated function): ``python tests/tools/check_imports.py``."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROOMS = ("core", "store", "tui", "cli", "tests")  # tests: a renamed module breaks them too


def module_of(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    pkg = parts[-1] == "__init__"
    return "portside." + ".".join(parts[:-1] if pkg else parts), pkg


def targets(path: Path) -> list[tuple[int, str]]:
    here, pkg = module_of(path)
    out = []
    for n in ast.walk(ast.parse(path.read_text())):
        if isinstance(n, ast.ImportFrom):
            if n.level and here.startswith("portside.tests."):
                continue  # tests/ is no package of portside: its relative imports are its own
            if n.level:
                base = here.split(".") if pkg else here.split(".")[:-1]
                base = base[: len(base) - (n.level - 1)]
                mod = ".".join(base + ([n.module] if n.module else []))
            else:
                mod = n.module or ""
            if mod.startswith("portside"):
                out.append((n.lineno, mod))
                out += [(n.lineno, f"{mod}:{a.name}") for a in n.names if a.name != "*"]
                out += [(n.lineno, f"{mod}.{a.name}") for a in n.names
                        if (REPO / "/".join(f"{mod}.{a.name}".split(".")[1:])).with_suffix(".py")
                        .exists()]
        elif isinstance(n, ast.Import):
            out += [(n.lineno, a.name) for a in n.names if a.name.startswith("portside")]
    return out


def _exists(target: str) -> bool:
    """A module (``a.b``), or a name a module defines (``a.b:c``, a submodule counts)."""
    mod, _, name = target.partition(":")
    try:
        if not name:
            return importlib.util.find_spec(mod) is not None
        if importlib.util.find_spec(f"{mod}.{name}") is not None:
            return True
    except ModuleNotFoundError:  # also: `mod` is a module, not a package
        if not name:
            return False
    try:
        return hasattr(importlib.import_module(mod), name)
    except ImportError as exc:  # an optional extra (ray) is not installed: not this check's
        return "portside" not in str(exc)


def main() -> int:
    bad = []
    for room in ROOMS:
        for path in sorted((REPO / room).rglob("*.py")):
            for line, mod in targets(path):
                if not _exists(mod):
                    what = "no name" if ":" in mod else "no module"
                    bad.append(f"{path.relative_to(REPO)}:{line}: {what} {mod}")
    print("\n".join(bad) or "every portside import names a module and a name that exist")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
