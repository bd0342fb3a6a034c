"""Token-shaped secrets never reach the log, whoever printed them (issue 24 item 5): masked at
the bus (every live event) and in imported transcripts, so the database, `show` and the JSONL
export inherit it; ordinary training output, hashes and paths are left alone. The environment
rules catch *_PWD, *_DSN and *WEBHOOK*; secret-looking files stay out of copies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cc_transcript import Session, text, tool
from cli_run import cli

from portside.core.log import events as ev
from portside.core.log.bus import EventBus
from portside.core.safety.secrets import is_secret_name, scrub_env
from portside.core.workspace.workspace import Workspace
from portside.store import Store

# Built from pieces so that this file itself holds no token a scanner would flag.
GHP = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
TOKENS = {
    "anthropic": "sk-ant-api03-" + "x9Y8z7W6v5U4t3S2r1Q0p9O8n7M6",
    "openai": "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1w",
    "openai-old": "sk-" + "4bC7eF0hI3kL6nO9qR2tU5wX8zA1cD",
    "github": GHP,
    "github-oauth": "gho_" + "Z" * 20 + "1234567890abcdef",
    "github-pat": "github_pat_" + "11ABCDEFG0" + "a" * 30,
    "gitlab": "glpat-" + "Xy9-Zw8_Vu7Ts6Rq5Po4",
    "slack": "xoxb-" + "1234567890-0987654321-AbCdEfGh",
    "aws": "AKIA" + "IOSFODNN7EXAMPLE",
    "aws-session": "ASIA" + "Q3EXAMPLE7654321",
    "huggingface": "hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ012345",
}
URLS = {
    "slack-webhook": ("https://hooks.slack.com/services/T0001/B0002/" + "Xy" * 12,
                      "https://hooks.slack.com/services/***"),
    "userinfo": ("postgres://app:hunter2@db.internal:5432/x", "postgres://app:***@db.internal"),
    "dsn": ("https://" + "0123456789abcdef" * 2 + "@o1.ingest.sentry.io/42", "https://***@o1"),
    "token-in-url": (f"https://{GHP}@github.com/o/r.git", "https://***@github.com/o/r.git"),
}
ORDINARY = [
    "Train Epoch: 2 [3200/4000 (80%)]\tLoss: 0.391284 grad_norm=0.93 lr=1.0e-03",
    "step=412 loss=0.412 38 it/s compiles 2 max_norm 1.0 clips 3%",
    "sha256 9f86d081884c7d659a2feaea0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a0",
    "commit 4b825dc642cb6eb9a060e54bf8d69288fbee4904 (HEAD -> main)",
    "/home/user/.cache/huggingface/hub/models--bert-base-uncased/snapshots/abc/config.json",
    "git clone git@github.com:pytorch/xla.git && ssh://git@gitlab.example.com/group/repo.git",
    "https://github.com/pytorch/xla/blob/master/README.md  http://localhost:8080/",
    "pip install scikit-learn sk-video; task-skip-list ask-the-user-anything-ok",
    "uuid 123e4567-e89b-12d3-a456-426614174000 run ref1-c7ebe47bfc81 toolu_01ABCdef",
    "torch_xla._XLAC._xla_get_default_device() PJRT_DEVICE=TPU XLA_FLAGS=--xla_dump_to=/tmp",
    "AKIAshort hf_x ghp_short xoxb- sk-ant- glpat-",
]


def _events(sid: str) -> list[ev.Event]:
    secret_lines = [f"{k}: {v}" for k, v in TOKENS.items()] + [u for u, _ in URLS.values()]
    return [
        ev.SessionStarted(session_id=sid, project="/p", target="cpu",
                          meta={"remote": URLS["token-in-url"][0]}),
        ev.RunOutput(session_id=sid, run_id="r1", lines=[*ORDINARY, *secret_lines]),
        ev.AgentToolResult(session_id=sid, call_id="c1", content="\n".join(secret_lines)),
        ev.AlarmRaised(session_id=sid, alarm_id="a1", check="crashed", severity="error",
                       title=f"push failed for {URLS['token-in-url'][0]}",
                       evidence={"stderr": [TOKENS["aws"], {"key": TOKENS["huggingface"]}]}),
        ev.AgentToolCall(session_id=sid, call_id="c2", name="Bash",
                         input={"command": f"curl -H 'x-api-key: {TOKENS['anthropic']}' u"}),
    ]


def _leaks(blob: str) -> list[str]:
    found = [k for k, v in TOKENS.items() if v in blob]
    found += [k for k, (u, _) in URLS.items() if u in blob]
    return found + (["hunter2"] if "hunter2" in blob else [])


def test_every_stored_text_is_masked_at_the_bus(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with Store(db) as store:
        bus = EventBus(store.recorder)
        for e in _events("masked"):
            bus.publish(e)
        store.recorder.flush()
        bodies = "\n".join(store.event_bodies("masked"))
        out = next(e for e in store.events("masked") if isinstance(e, ev.RunOutput))
    assert _leaks(bodies) == []
    assert out.lines[:len(ORDINARY)] == ORDINARY  # ordinary text: byte for byte
    shown = "\n".join(out.lines)
    for _, masked in URLS.values():
        assert masked in shown, (masked, shown)
    res = cli("export", "masked", db=db, timeout=120)
    assert res.returncode == 0, res.stderr
    assert _leaks(res.stdout) == [] and "Train Epoch: 2" in res.stdout


def test_imported_transcripts_lose_their_tokens(tmp_path: Path) -> None:
    """Tokens in tool output that this environment never held (the API key is masked by value;
    these only by their form), through the real CLI."""
    project = tmp_path / "p"
    project.mkdir()
    s = Session(project)
    s.prompt("Push the port.")
    s.reply(tool("toolu_b", "Bash", command="cat ~/.config/gh/hosts.yml", description="gh"))
    s.bash("toolu_b", f"oauth_token: {GHP}\nANTHROPIC_API_KEY={TOKENS['anthropic']}")
    s.reply(text(f"Pushed with {URLS['token-in-url'][0]}"))
    transcript = s.write(tmp_path / "t.jsonl")
    db = tmp_path / "s.db"
    res = cli("import", "--claude-code", str(transcript), "--as", "cc", db=db, timeout=120)
    assert res.returncode == 0, res.stderr
    with Store(db) as store:
        bodies = "\n".join(store.event_bodies("cc"))
    assert _leaks(bodies) == [] and "oauth_token: ***" in bodies
    show = cli("show", "cc", db=db, timeout=120)
    assert show.returncode == 0 and _leaks(show.stdout) == []


def test_a_foreign_recording_loses_its_tokens_on_import(tmp_path: Path) -> None:
    """`portside import FILE.jsonl` writes past the bus: a recording made elsewhere (or by an
    older portside) carrying a token is masked there too (it was stored as it came)."""
    from portside.core.log import events as ev_mod

    events = _events("foreign")
    for i, e in enumerate(events, 1):
        e.seq, e.ts = i, 1_700_000_000.0 + i
    rec = tmp_path / "foreign.jsonl"
    header = {"events": len(events), "format": "portside-recording", "schema": 1,
              "session_id": "foreign"}
    rec.write_text(json.dumps(header, sort_keys=True) + "\n"
                   + "".join(ev_mod.encode(e).decode() + "\n" for e in events))
    assert _leaks(rec.read_text()) != []  # the file itself holds them
    db = tmp_path / "s.db"
    res = cli("import", str(rec), db=db, timeout=120)
    assert res.returncode == 0, res.stderr
    with Store(db) as store:
        bodies = "\n".join(store.event_bodies("foreign"))
    assert _leaks(bodies) == [] and "Train Epoch: 2" in bodies


@pytest.mark.parametrize("name", ["MYSQL_PWD", "DB_PWD", "SENTRY_DSN", "SLACK_WEBHOOK_URL",
                                  "DISCORDWEBHOOK", "DATABASE_DSN"])
def test_more_secret_names(name: str) -> None:
    assert is_secret_name(name)
    assert scrub_env({name: "value-123", "PWD": "/w", "OLDPWD": "/"}) == {"PWD": "/w",
                                                                          "OLDPWD": "/"}


def test_a_token_inside_a_value_is_a_secret() -> None:
    env = {"REMOTE": URLS["token-in-url"][0], "HOOK": URLS["slack-webhook"][0],
           "SENTRY": URLS["dsn"][0], "URL": "https://github.com/pytorch/xla"}
    assert scrub_env(env) == {"URL": "https://github.com/pytorch/xla"}


SECRET_NAMES = [".s3cfg", ".vault-token", ".boto", ".databrickscfg", "hf_token.txt",
                ".huggingface/token", "conf/wandb_api_key.txt", "WANDB_KEY"]


def test_secret_looking_files_are_withheld_from_copies(tmp_path: Path) -> None:
    project = tmp_path / "p"
    project.mkdir()
    for rel in [*SECRET_NAMES, "train.py", "tokenizer.json", "boto_utils.py"]:
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text("x\n")
    ws = Workspace.create(project, tmp_path / "ws")
    assert sorted(ws.withheld) == sorted(SECRET_NAMES)
    assert sorted(ws.list_files()) == ["boto_utils.py", "tokenizer.json", "train.py"]
    copy = Workspace.pristine_copy(project, tmp_path / "copy")
    assert sorted(p.name for p in copy.rglob("*") if p.is_file()) == [
        "boto_utils.py", "tokenizer.json", "train.py"]
    assert json.dumps(ws.withheld)  # shown to the reviewer by name
