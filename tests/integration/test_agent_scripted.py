"""The scripted agent: a recorded sequence replayed through the same host and tools."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from doubles import MemorySink

from portside.core.agent.base import AgentStopped, EditOutcome
from portside.core.agent.scripted import ScriptedAgent, ScriptError, load_script
from portside.core.log import events as ev
from portside.core.log.bus import EventBus
from portside.core.workspace.edits import Edit
from portside.core.workspace.workspace import Workspace

TRAIN_PY = """\
import torch

device = torch.device("cuda")
model = torch.nn.Linear(4, 2).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(10):
    loss = model(torch.randn(8, 4, device=device)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    opt.step()
"""


class Host:
    """A real Workspace and EventBus; the reviewer rejects edits whose new text contains any of
    ``reject`` (with that reason); canned run summaries."""

    def __init__(self, ws: Workspace) -> None:
        self.session_id = "sess-scripted"
        self.workspace = ws
        self.sink = MemorySink()
        self.bus = EventBus(self.sink)
        self.reject: dict[str, str] = {}
        self.stopped = False
        self.checkpoints = 0

    def of(self, kind: type[ev.Event]) -> list[Any]:
        return [e for e in self.sink.events if isinstance(e, kind)]

    def publish(self, event: ev.Event) -> ev.Event:
        return self.bus.publish(event)

    async def propose_replace(self, path: str, old: str, new: str, rationale: str) -> EditOutcome:
        return self._review(self.workspace.propose_replace(path, old, new))

    async def propose_write(self, path: str, content: str, rationale: str) -> EditOutcome:
        return self._review(self.workspace.propose_write(path, content))

    def _review(self, edit: Edit) -> EditOutcome:
        self.publish(
            ev.EditProposed(
                session_id=self.session_id,
                edit_id=edit.edit_id,
                path=edit.path,
                before=edit.before,
                after=edit.after,
            )
        )
        for needle, reason in self.reject.items():
            if needle in edit.after:
                return EditOutcome("rejected", edit.edit_id, reason)
        self.workspace.apply(edit)
        return EditOutcome("applied", edit.edit_id, "")

    async def run_reference(self) -> str:
        return "reference run#2: passed"

    async def run_candidate(self) -> str:
        return "candidate run#3: passed; alarms: none"

    def read_run_log(self, run: str = "last", tail: int = 50, grep: str | None = None) -> str:
        return f"log of {run}, last {tail} lines"

    async def claim(self, summary: str) -> str:
        self.publish(ev.AgentClaimed(session_id=self.session_id, summary=summary))
        return "Claim recorded."

    def take_messages(self) -> list[str]:
        return []

    async def checkpoint(self) -> None:
        self.checkpoints += 1
        if self.stopped:
            raise AgentStopped("stop")


@pytest.fixture
def host(tmp_path: Path) -> Host:
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "train.py").write_text(TRAIN_PY)
    return Host(Workspace.create(proj, tmp_path / "workspaces"))


def recording(tmp_path: Path, *lines: Any, name: str = "port.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return path


class Sleeps(list[float]):
    async def __call__(self, seconds: float) -> None:
        self.append(seconds)


XLA_EDIT = {
    "path": "train.py",
    "old": 'device = torch.device("cuda")',
    "new": "device = torch_xla.device()",
    "rationale": "XLA device",
}


async def test_replays_a_port_and_labels_itself(host: Host, tmp_path: Path) -> None:
    path = recording(
        tmp_path,
        "# a comment, then a blank line",
        "",
        {"say": "Reading the training script."},
        {"list": "*.py"},
        {"read": "train.py"},
        {"grep": {"pattern": "clip_grad", "glob": "*.py"}},
        {"wait": 2},
        {"edit": XLA_EDIT},
        {"run": "candidate"},
        {"log": {"tail": 5}},
        {"claim": "Runs on the XLA device; clipping unchanged."},
        {"say": "(after the claim)"},
    )
    sleeps = Sleeps()
    agent = ScriptedAgent(path, speed=4, sleep=sleeps)
    assert agent.label == "scripted:port.jsonl"
    await agent.run(host)

    assert agent.last_stop == "claimed" and sleeps == [0.5]
    assert host.workspace.read_file("train.py").count("torch_xla.device()") == 1
    first = host.sink.events[0]
    assert isinstance(first, ev.SessionState) and first.state == "agent-scripted"
    assert "port.jsonl" in first.detail and "no model is called" in first.detail
    calls = host.of(ev.AgentToolCall)
    assert [c.name for c in calls] == [
        "list_files",
        "read_file",
        "grep",
        "propose_edit",
        "run_candidate",
        "read_run_log",
        "finish",
    ]
    assert all(c.call_id.startswith("scripted-") for c in calls)
    results = {r.call_id: r for r in host.of(ev.AgentToolResult)}
    assert results[calls[0].call_id].content == "train.py"
    assert 'device = torch.device("cuda")' in results[calls[1].call_id].content  # a real read
    assert "train.py:10:" in results[calls[2].call_id].content
    assert results[calls[4].call_id].content == "candidate run#3: passed; alarms: none"
    assert results[calls[5].call_id].content == "log of last, last 5 lines"
    assert [t.text for t in host.of(ev.AgentText)] == ["Reading the training script."]
    assert host.of(ev.AgentClaimed)[0].summary.startswith("Runs on the XLA device")
    assert host.of(ev.AgentUsage) == []

    # run() again continues after the claim, and announces itself only once
    await agent.run(host)
    assert agent.last_stop == "end"
    assert host.of(ev.AgentText)[-1].text == "(after the claim)"
    assert len(host.of(ev.SessionState)) == 1


async def test_rejected_edit_plays_the_recorded_alternative(host: Host, tmp_path: Path) -> None:
    host.reject = {"max_norm=0.05": "Keep max_norm=1.0, as in the reference."}
    path = recording(
        tmp_path,
        {
            "edit": {
                "path": "train.py",
                "old": "max_norm=1.0)\n    opt.step()",
                "new": "max_norm=0.05)\n    opt.step()",
            },
            "if_rejected": {
                "say": "Understood, keeping the clipping; moving the step instead.",
                "edit": {
                    "path": "train.py",
                    "old": "    opt.step()\n",
                    "new": "    opt.step()\n    torch_xla.sync()\n",
                    "rationale": "end the step",
                },
            },
        },
        {"claim": "done"},
    )
    await ScriptedAgent(path, speed=0).run(host)

    text = host.workspace.read_file("train.py")
    assert "max_norm=1.0" in text and "torch_xla.sync()" in text
    results = host.of(ev.AgentToolResult)
    assert results[0].is_error
    assert (
        results[0].content
        == "The reviewer rejected this edit: Keep max_norm=1.0, as in the reference."
    )
    assert not results[1].is_error
    assert [t.text for t in host.of(ev.AgentText)] == [
        "Understood, keeping the clipping; moving the step instead."
    ]
    assert [c.name for c in host.of(ev.AgentToolCall)] == ["propose_edit", "propose_edit", "finish"]


async def test_edit_that_does_not_apply_is_an_error_and_replay_goes_on(
    host: Host, tmp_path: Path
) -> None:
    path = recording(
        tmp_path,
        {"edit": {"path": "train.py", "old": "not in the file", "new": "x"}},
        {"write": {"path": "xla_env.sh", "content": "export PJRT_DEVICE=TPU\n"}},
        {"claim": "done"},
    )
    await ScriptedAgent(path, speed=0).run(host)
    results = host.of(ev.AgentToolResult)
    assert results[0].is_error and "was not found in train.py" in results[0].content
    assert host.workspace.read_file("xla_env.sh") == "export PJRT_DEVICE=TPU\n"


async def test_speed_zero_never_sleeps_and_stop_is_honoured(host: Host, tmp_path: Path) -> None:
    path = recording(tmp_path, {"wait": 30}, {"say": "a"}, {"say": "b"})
    sleeps = Sleeps()
    agent = ScriptedAgent(path, speed=0, sleep=sleeps)
    host.stopped = True
    with pytest.raises(AgentStopped):
        await agent.run(host)
    assert agent.position == 0 and host.of(ev.AgentText) == []
    host.stopped = False
    await agent.run(host)
    assert sleeps == [] and [t.text for t in host.of(ev.AgentText)] == ["a", "b"]


def test_malformed_lines_are_refused_at_load_time(tmp_path: Path) -> None:
    path = recording(
        tmp_path,
        {"say": "fine"},
        '{"say": "unterminated',
        {"say": "a", "read": "b"},
        {"edit": {"path": "train.py", "new": "x"}},
        {"run": "gpu"},
        {"wait": -1},
        {"read": {"path": "t.py", "start_line": 0}},
        ["not", "an", "object"],
        {"claim": ""},
        {"edit": {"path": "a", "old": "b", "new": "c"}, "if_rejected": {"note": "x"}},
        {"frobnicate": 1},
        {"say": "hi", "extra": 1},
        name="bad.jsonl",
    )
    with pytest.raises(ScriptError) as info:
        ScriptedAgent(path)
    lines = str(info.value).splitlines()
    assert lines == [
        "bad.jsonl:2: not valid JSON: Unterminated string starting at (column 9)",
        "bad.jsonl:3: needs exactly one action key (say, read, list, grep, edit, write, run, log, claim, wait); found say, read",
        "bad.jsonl:4: edit: missing old",
        'bad.jsonl:5: run must be "candidate" or "reference", got "gpu"',
        "bad.jsonl:6: wait must be a number of seconds >= 0, got -1",
        "bad.jsonl:7: read.start_line must be a positive integer, got 0",
        "bad.jsonl:8: expected a JSON object, got an array",
        "bad.jsonl:9: claim must not be empty",
        "bad.jsonl:10: if_rejected: unknown field(s) note",
        "bad.jsonl:11: needs exactly one action key (say, read, list, grep, edit, write, run, log, claim, wait); found none",
        "bad.jsonl:12: unknown key(s) extra beside 'say'",
    ]


def test_empty_and_missing_recordings_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ScriptError, match="has no steps"):
        load_script(recording(tmp_path, "# only a comment"))
    with pytest.raises(ScriptError, match="cannot read the recording"):
        load_script(tmp_path / "missing.jsonl")


def test_the_scripted_agent_does_not_import_the_sdk() -> None:
    # the scripted agent must work without the API (and without paying the SDK's import)
    import subprocess

    code = (
        "import sys; import portside.core.agent.scripted; "
        "sys.exit(1 if 'anthropic' in sys.modules else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
