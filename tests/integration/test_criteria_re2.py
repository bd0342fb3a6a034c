"""Criteria regexes match in linear time (RE2): a catastrophic pattern never freezes the loop
or changes an observed outcome (issue 13 item 9)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from cli_run import cli

from portside.core.log.criteria import CriteriaError, PatternError, compile_pattern, parse_criteria

CATASTROPHIC = r"^(?P<value>(x+x+)+y)$"  # exponential for a backtracking engine on "xxx…x"


def test_catastrophic_pattern_is_linear() -> None:
    rx = compile_pattern(CATASTROPHIC)
    t0 = time.perf_counter()
    for _ in range(1000):
        assert rx.search("x" * 200) is None
    assert time.perf_counter() - t0 < 1.0
    assert rx.search("xxy").group("value") == "xxy"


@pytest.mark.parametrize("pattern", [r"(?P<value>a)\1", r"(?=x)(?P<value>x)", r"(?P<value>[)"])
def test_unsupported_or_bad_patterns_are_refused_at_load(pattern: str) -> None:
    with pytest.raises(PatternError):
        compile_pattern(pattern)
    toml = f"[output]\npatterns = [{{name = 'm', pattern = {json.dumps(pattern)}}}]\n"
    with pytest.raises(CriteriaError, match=r"output\.patterns: item 0 \(m\): bad regex"):
        parse_criteria(toml, "c.toml")


def test_catastrophic_pattern_does_not_change_the_outcome(tmp_path: Path) -> None:
    """A run that prints lines the pattern backtracks on and exits 0 after ~3 s: `passed`,
    not `failed-timeout` (the loop froze for 19 s per run with Python's re)."""
    (tmp_path / "c.toml").write_text(
        f"[output]\npatterns = [{{name = 'junk', pattern = {json.dumps(CATASTROPHIC)}}}]\n")
    (tmp_path / "t.py").write_text(
        "import time\n"
        "for i in range(30):\n"
        "    print('x' * 40, flush=True)\n"
        "    time.sleep(0.1)\n")
    cmd = f"{sys.executable} t.py"
    t0 = time.monotonic()
    out = cli("verify", "--reference", cmd, "--candidate", cmd, "--target", "cpu",
              "--reference-runs", "1", "--criteria", "c.toml", "--timeout", "20", "--json",
              db=tmp_path / "p.db", cwd=tmp_path, timeout=120)
    data = json.loads(out.stdout)
    runs = [*data["reference"], *data["attempts"]]
    assert [r["reason"] for r in runs] == ["exit", "exit"], out.stderr
    assert data["attempts"][0]["exit_code"] == 0
    assert data["attempts"][0]["outcome"] != "failed-timeout"
    assert time.monotonic() - t0 < 60
