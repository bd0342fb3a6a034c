"""The third-party libraries the corpus runs (accelerate, transformers, Lightning) are pinned
twice: pyproject.toml's `thirdparty` extra (the main venv, the CPU references) and
tests/xla/make_venv.sh (the torch_xla venv, the ports). A reference on one version and its port
on another would judge the libraries' difference, not the port's: the two lists must agree."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_torch_xla_venv_pins_the_thirdparty_extra() -> None:
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["thirdparty"]
    script = (ROOT / "tests/xla/make_venv.sh").read_text()
    m = re.search(r'^THIRDPARTY="([^"]*)"$', script, re.M)
    assert m, "make_venv.sh names its pins in THIRDPARTY=\"...\""
    assert sorted(m.group(1).split()) == sorted(extra)
    assert all(re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][0-9A-Za-z.]*", p) for p in extra), extra
