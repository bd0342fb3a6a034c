"""Codex's pieces that need no process: --agent codex spellings, the spec round trip through
the registry (resume), and Codex's hunks applied to and undone from whole files."""

from __future__ import annotations

import click
import pytest

from portside.cli.options import agent_from_option
from portside.core.agent.registry import agent_from_spec
from portside.core.codex.live import CodexAgent, apply_diff
from portside.core.codex.rollout import reverse_diff

BEFORE = "import torch\nx = 1\ny = 2\nz = 3\n"
DIFF = "@@ -2,2 +2,3 @@\n-x = 1\n+x = 10\n+w = 0\n y = 2\n"


def test_agent_option_and_spec_round_trip() -> None:
    agent = agent_from_option("codex:gpt-5.5", None)
    assert isinstance(agent, CodexAgent) and agent.label == "codex:gpt-5.5"
    plain = agent_from_option("codex", None)
    assert isinstance(plain, CodexAgent) and plain.model is None and plain.label == "codex"
    agent.task, agent.thread_id = "port it", "t-1"
    again = agent_from_spec(agent.spec())
    assert isinstance(again, CodexAgent)
    assert (again.model, again.task, again.thread_id) == ("gpt-5.5", "port it", "t-1")
    with pytest.raises(click.BadParameter, match="codex:MODEL"):
        agent_from_option("codexx", None)


def test_hunks_applied_and_undone() -> None:
    after = apply_diff(BEFORE, DIFF)
    assert after == "import torch\nx = 10\nw = 0\ny = 2\nz = 3\n"
    assert apply_diff(after, reverse_diff(DIFF)) == BEFORE
    with pytest.raises(ValueError, match="does not match"):
        apply_diff(after, DIFF)  # applied twice: the old line is not there any more
