"""Criteria TOML: defaults, every refusal with `file:line: section.key: what`."""

from __future__ import annotations

import dataclasses as dc
import json
from pathlib import Path

import pytest

from portside.core.log.criteria import (
    DEFAULT_CRITERIA,
    DEFAULT_TOML_PATH,
    CriteriaError,
    load_criteria,
    parse_criteria,
)

FULL = """\
[goal]
metric = "accuracy"
pattern = 'accuracy=(?P<value>[0-9.]+)'
direction = "max"
tolerance = 0.5

[drift]
series = ["loss", "grad_norm"]
rtol = 0.05
window = 10

[compile]
warmup_steps = 3
max_recompiles = 0
allowed_fallback_ops = ["aten::_local_scalar_dense", "aten::nonzero"]

[performance]
max_step_time_ratio = 0

[hardware]
devices = 1

[budget]
max_attempts = 10
max_cost_usd = 0
max_human_minutes = 0

[prices]
"tpu-v5e" = 1.0
"claude-sonnet-4-5/mtok-in" = 2.5

[output]
patterns = [{ name = "val_loss", pattern = 'val_loss=(?P<value>[0-9.]+)' }]
"""


def test_empty_is_defaults():
    assert parse_criteria("") == dc.replace(DEFAULT_CRITERIA, source="<string>")
    assert load_criteria(None) is DEFAULT_CRITERIA


def test_shipped_default_toml_matches_defaults():
    c = load_criteria(DEFAULT_TOML_PATH)
    assert dc.replace(c, source="<defaults>") == DEFAULT_CRITERIA


def test_full_example_from_the_issue(tmp_path: Path):
    p = tmp_path / "criteria.toml"
    p.write_text(FULL)
    c = load_criteria(p)
    assert c.goal.metric == "accuracy" and c.goal.tolerance == 0.5
    assert c.drift.window == 10 and c.drift.series == ("loss", "grad_norm")
    assert isinstance(c.performance.max_step_time_ratio, float)  # TOML `0` where a float is meant
    assert isinstance(c.budget.max_cost_usd, float)
    assert c.hardware.devices == 1 and c.compile.allowed_fallback_ops[1] == "aten::nonzero"
    assert c.price_overrides == {"tpu-v5e": 1.0, "claude-sonnet-4-5/mtok-in": 2.5}
    names = [n for n, _ in c.output_patterns()]
    assert names == ["accuracy", "val_loss"]
    assert c.output_patterns()[0][1].search("accuracy=91.5").group("value") == "91.5"
    json.dumps(c.to_dict())
    assert c.source == str(p)


@pytest.mark.parametrize(("text", "message"), [
    ("[drift]\nwindow = -1\n", "c.toml:2: drift.window: must be >= 1, got -1"),
    ("[drift]\nwindow = 2.5\n", "c.toml:2: drift.window: must be an integer"),
    ("[drift]\nwindow = true\n", "c.toml:2: drift.window: must be an integer"),
    ("[drift]\nrtol = -0.1\n", "c.toml:2: drift.rtol: must be >= 0"),
    ("[drift]\nrtol = \"5%\"\n", "c.toml:2: drift.rtol: must be a number"),
    ("[drift]\nrtol = nan\n", "c.toml:2: drift.rtol: must be a number"),
    ("[drift]\nseries = [\"loss\", \"acc\"]\n", "c.toml:2: drift.series: unknown series acc"),
    ("[drift]\nsmooth = 0\n", "c.toml:2: drift.smooth: must be >= 1"),
    ("[drift]\nwindw = 3\n", "c.toml:2: drift.windw: unknown key"),
    ("[gaol]\nmetric = 'a'\n", "c.toml:1: gaol: unknown section"),
    ("goal = 3\n", "c.toml: goal: must be a table"),
    ("[goal]\nmetric = 'a'\ndirection = 'up'\n", "c.toml:3: goal.direction: must be one of max, min"),
    ("[goal]\nmetric = 'a'\npattern = '(['\n", "c.toml:3: goal.pattern: bad regex"),
    ("[goal]\nmetric = 'a'\npattern = 'acc=([0-9.]+)'\n", "c.toml:3: goal.pattern: regex needs a named group `value`"),
    ("[goal]\npattern = 'acc=(?P<value>[0-9.]+)'\n", "c.toml:2: goal.pattern: set without goal.metric"),
    ("[compile]\nallowed_fallback_ops = 'aten::nonzero'\n", "c.toml:2: compile.allowed_fallback_ops: must be a list of strings"),
    ("[compile]\nmax_recompiles = -1\n", "c.toml:2: compile.max_recompiles: must be >= 0"),
    ("[hardware]\ndevices = -2\n", "c.toml:2: hardware.devices: must be >= 0"),
    ("[budget]\nmax_cost_usd = -5\n", "c.toml:2: budget.max_cost_usd: must be >= 0"),
    ("[prices]\n\"tpu-v9\" = 1.0\n", "c.toml:2: prices.tpu-v9: unknown price"),
    ("[prices]\n\"claude-sonnet-4-5\" = 1.0\n", "c.toml:2: prices.claude-sonnet-4-5: unknown price"),
    ("[prices]\n\"h100\" = -1\n", "c.toml:2: prices.h100: must be >= 0"),
    ("[output]\npatterns = [{ name = 'x', pattern = 'x=([0-9]+)' }]\n", "c.toml:2: output.patterns: item 0 (x): regex needs"),
    ("[output]\npatterns = [{ name = 'x' }]\n", "c.toml:2: output.patterns: item 0 must be"),
    ("[output]\npattern = []\n", "c.toml:2: output.pattern: unknown key"),
    ("[output]\npatterns = [{ name = 'x', pattern = '(?P<value>1)' }, { name = 'x', pattern = '(?P<value>2)' }]\n",
     "c.toml:2: output.patterns: item 1: duplicate name"),
    ("[goal\n", "c.toml: not valid TOML"),
])
def test_refusals(text: str, message: str):
    with pytest.raises(CriteriaError) as exc:
        parse_criteria(text, "c.toml")
    assert str(exc.value).startswith(message), str(exc.value)


def test_line_numbers_point_at_the_key_in_its_section():
    text = "# comment\n[goal]\nmetric = 'a'\n\n[drift]\nrtol = 0.1\nwindow = 0\n"
    with pytest.raises(CriteriaError, match=r"^c.toml:7: drift.window"):
        parse_criteria(text, "c.toml")


def test_unreadable_file(tmp_path: Path):
    with pytest.raises(CriteriaError, match="cannot read"):
        load_criteria(tmp_path / "missing.toml")


def test_criteria_are_frozen():
    with pytest.raises(dc.FrozenInstanceError):
        DEFAULT_CRITERIA.drift.rtol = 1.0  # type: ignore[misc]


def test_hosts_section_names_where_each_role_runs() -> None:
    from portside.core.log.criteria import CriteriaError, parse_criteria

    c = parse_criteria('[hosts]\ncandidate = "ssh://root@tpu-vm:2222/work,tpu-vm-2"\n', "c.toml")
    assert c.hosts.candidate.startswith("ssh://root@tpu-vm") and c.hosts.reference == ""
    assert type(c).from_dict(c.to_dict()) == c
    with pytest.raises(CriteriaError) as err:
        parse_criteria('[hosts]\nreference = "ssh://h:99999"\n', "c.toml")
    assert "c.toml" in str(err.value) and "reference" in str(err.value) and "99999" in str(err.value)


def test_sandbox_limits_have_defaults_and_are_checked_with_their_line() -> None:
    c = parse_criteria("")
    assert (c.sandbox.max_processes, c.sandbox.max_memory_fraction,
            c.sandbox.tmp_size_fraction) == (16384, 0.9, 0.25)
    c = parse_criteria("[sandbox]\nmax_processes = 64\nmax_memory_fraction = 0.5\n"
                       "tmp_size_fraction = 0\n")
    assert (c.sandbox.max_processes, c.sandbox.max_memory_fraction,
            c.sandbox.tmp_size_fraction) == (64, 0.5, 0.0)
    for body, what in (("max_processes = -1", "must be >= 0"),
                       ("max_processes = 1.5", "must be an integer"),
                       ("max_memory_fraction = 1.5", "must be a number from 0 to 1"),
                       ("tmp_size_fraction = nan", "must be a number from 0 to 1"),
                       ("tmp_size_fraction = true", "must be a number from 0 to 1"),
                       ('readable = ["data"]', "must be absolute paths"),
                       ('readable = "/data"', "must be a list of paths")):
        with pytest.raises(CriteriaError) as e:
            parse_criteria(f"[goal]\nmetric = 'x'\n[sandbox]\nnetwork = false\n{body}\n", "c.toml")
        key = body.split()[0]
        assert str(e.value).startswith(f"c.toml:5: sandbox.{key}: {what}"), str(e.value)


def test_a_file_that_is_not_utf8_is_named_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "criteria.toml"
    path.write_bytes(b"[goal]\nmetric = 'acc'\n# caf\xe9 in latin-1\n")
    with pytest.raises(CriteriaError) as e:
        load_criteria(path)
    assert str(e.value).startswith(f"{path}:3:6: not UTF-8 (byte(s) e9)"), str(e.value)
