"""Secrets never reach a run, the log or an export (issue 13 item 7): a wider denylist, inline
assignments redacted in stored commands, scrubbed values redacted from run output."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from portside.core.log import events as ev
from portside.core.run.runner import Runner, RunSpec
from portside.core.safety.secrets import is_secret_name, redact_command, scrub_env

MISSED_BEFORE = ["API_KEY", "SECRET_KEY", "PGPASSWORD", "SSH_PRIVATE_KEY", "AWS_ACCESS_KEY_ID",
                 "KAGGLE_KEY", "OPENAI_KEY", "GH_PAT"]
KEPT = ["PATH", "HOME", "PWD", "OLDPWD", "PYTHONPATH", "XLA_FLAGS", "PJRT_DEVICE", "LANG",
        "CUDA_VISIBLE_DEVICES", "TOKENIZERS_PARALLELISM", "TPU_NAME", "KEYBOARD_LAYOUT"]


@pytest.mark.parametrize("name", MISSED_BEFORE + ["HF_TOKEN", "ANTHROPIC_API_KEY"])
def test_denylist(name: str) -> None:
    assert scrub_env({name: "v4lue-x", "PATH": "/bin"}) == {"PATH": "/bin"}


@pytest.mark.parametrize("name", KEPT)
def test_ordinary_variables_are_kept(name: str) -> None:
    assert not is_secret_name(name)
    assert scrub_env({name: "/some/value"}) == {name: "/some/value"}


@pytest.mark.parametrize(("name", "value"), [
    ("DATABASE_URL", "postgres://app:hunter2@db.internal:5432/x"),
    ("PIP_INDEX_URL", "https://user:t0ken@pypi.corp/simple"),
    ("MY_SETTING", "ghp_" + "a" * 36),
])
def test_secret_values_by_form(name: str, value: str) -> None:
    assert scrub_env({name: value}) == {}


def test_public_url_is_kept() -> None:
    env = {"PIP_INDEX_URL": "https://pypi.org/simple", "HTTP_PROXY": "http://proxy:3128"}
    assert scrub_env(env) == env


@pytest.mark.parametrize(("command", "stored"), [
    ("HF_TOKEN=hf_abc123456 python train.py", "HF_TOKEN=*** python train.py"),
    ("env OPENAI_KEY='sk x' python t.py", "env OPENAI_KEY=*** python t.py"),
    ('export GH_PAT="p a t"; python t.py --lr=0.1', "export GH_PAT=***; python t.py --lr=0.1"),
    ("pip install -i https://u:pw12345@host/simple x && LR=1 python t.py",
     "pip install -i https://u:***@host/simple x && LR=1 python t.py"),
])
def test_inline_assignments_redacted(command: str, stored: str) -> None:
    assert redact_command(command) == stored


def test_a_run_stores_no_secret(tmp_path: Path) -> None:
    """Env secrets are not in the run; what it prints of an inline or file-read secret is
    masked before it is stored; the stored command has no secret."""
    env_secret, inline_secret = "env-secret-6f1c2d", "inline-secret-9a8b7c"
    (tmp_path / "token.txt").write_text(env_secret)  # the script finds the key on disk
    script = tmp_path / "t.py"
    script.write_text(
        "import os\n"
        "print('HF_TOKEN seen by the run:', os.environ.get('HF_TOKEN'))\n"
        "print('KAGGLE_KEY in env:', 'KAGGLE_KEY' in os.environ)\n"
        "print('from disk:', open('token.txt').read())\n"
    )
    events: list[ev.Event] = []
    runner = Runner("s", events.append, tmp_path / "probe")
    spec = RunSpec(run_id="r1", role="candidate", attempt=1, cwd=tmp_path, target="cpu",
                   command=f"HF_TOKEN={inline_secret} {sys.executable} t.py",
                   env={"PATH": "/usr/bin:/bin", "KAGGLE_KEY": env_secret}, timeout_s=60)
    result = asyncio.run(runner.run(spec))
    assert result.exit_code == 0, result.tail
    stored = "\n".join(json.dumps(ev.to_builtins(e)) for e in events)
    assert env_secret not in stored and inline_secret not in stored
    lines = [ln for e in events if isinstance(e, ev.RunOutput) for ln in e.lines]
    assert "HF_TOKEN seen by the run: ***" in lines  # the user's own inline value ran
    assert "KAGGLE_KEY in env: False" in lines
    assert "from disk: ***" in lines
    (started,) = [e for e in events if isinstance(e, ev.RunStarted)]
    assert started.command == f"HF_TOKEN=*** {sys.executable} t.py"
