"""The scripted agent: replays a recorded sequence of steps from a JSONL file.

It lets a session be demonstrated and tested without the API. It goes through the same host
and the same tools as the Claude agent, so the reviewer sees the same tool calls, diffs and
decisions; but every agent word comes from the recording, no model is called, its label is
``scripted:<file name>``, its tool call ids start with ``scripted-``, and it announces itself
with ``session.state`` "agent-scripted" when it starts.

Tool call ids read ``scripted-<n>-l<line>`` (n counts calls, line is the recording's line), so a
resumed session can tell from the log which steps were completed: :meth:`ScriptedAgent.restore`
continues at the first step without a tool result (a call that was cut off is made again).

Format: one JSON object per line, exactly one action key each (blank lines and lines starting
with ``#`` are skipped)::

    {"say": "text"}                          agent.text, as recorded
    {"read": "train.py"}                     read_file (or {"path", "start_line", "end_line"})
    {"list": "*.py"}                         list_files ("" lists everything)
    {"grep": "clip_grad"}                    grep (or {"pattern", "glob"})
    {"edit": {"path", "old", "new", "rationale"}, "if_rejected": {...}}
                                             propose_edit; rationale is optional
    {"write": {"path", "content", "rationale"}, "if_rejected": {...}}
                                             write_file
    {"run": "candidate"} / {"run": "reference"}
    {"log": {"run", "tail", "grep"}}         read_run_log (all optional; or a run name)
    {"claim": "summary"}                     finish: run() returns after portside answers
    {"wait": 1.5}                            pause (seconds / speed) so a demo looks alive

``if_rejected`` says what the recording does when the reviewer rejects the edit: ``{"say"?:
"...", "edit"?: {...}}`` (or ``"write"``), with its own ``if_rejected`` for the alternative;
without one the replay just goes on. The whole file is checked when it is loaded: a malformed
line raises :class:`ScriptError` naming ``file:line: what is wrong``, and nothing runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import os
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from portside.core.log import events as ev

from . import tools
from .base import AgentHost, AgentSpecError

__all__ = ["ScriptError", "ScriptedAgent", "Step", "load_script"]

ACTIONS = ("say", "read", "list", "grep", "edit", "write", "run", "log", "claim", "wait")


_CALL_ID = re.compile(r"^scripted-(\d+)(?:-l(\d+))?$")
_REJECTED = "The reviewer rejected this edit"  # tools.edit_result's wording


class ScriptError(ValueError):
    """A malformed recording; the message lists ``file:line: what is wrong`` for each line."""


@dataclass(frozen=True)
class Step:
    line: int
    action: str
    tool: str | None  # the tool it calls, None for say/wait
    args: dict[str, Any]  # tool input, or {"text"} / {"seconds"}
    if_rejected: Step | None = None
    say_if_rejected: str | None = None


class _Bad(Exception):
    pass


def _str(value: Any, what: str, *, empty: bool = False) -> str:
    if not isinstance(value, str):
        raise _Bad(f"{what} must be a string, got {_kind(value)}")
    if not empty and not value.strip():
        raise _Bad(f"{what} must not be empty")
    return value


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _Bad(f"{what} must be a positive integer, got {json.dumps(value)}")
    return value


def _obj(value: Any, what: str, required: tuple[str, ...], optional: tuple[str, ...]) -> dict:
    if not isinstance(value, dict):
        raise _Bad(f"{what} must be an object with {', '.join(required + optional)}")
    unknown = sorted(set(value) - set(required) - set(optional))
    if unknown:
        raise _Bad(f"{what}: unknown field(s) {', '.join(unknown)}")
    missing = [k for k in required if k not in value]
    if missing:
        raise _Bad(f"{what}: missing {', '.join(missing)}")
    return value


def _kind(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(
        type(value), "null" if value is None else "a number"
    )


def _edit_step(line: int, action: str, value: Any, rejected: Any) -> Step:
    if action == "edit":
        o = _obj(value, "edit", ("path", "old", "new"), ("rationale",))
        args = {
            "path": _str(o["path"], "edit.path"),
            "old": _str(o["old"], "edit.old"),
            "new": _str(o["new"], "edit.new", empty=True),
            "rationale": _str(o.get("rationale", ""), "edit.rationale", empty=True),
        }
        tool = "propose_edit"
    else:
        o = _obj(value, "write", ("path", "content"), ("rationale",))
        args = {
            "path": _str(o["path"], "write.path"),
            "content": _str(o["content"], "write.content", empty=True),
            "rationale": _str(o.get("rationale", ""), "write.rationale", empty=True),
        }
        tool = "write_file"
    alt: Step | None = None
    say: str | None = None
    if rejected is not None:
        r = _obj(rejected, "if_rejected", (), ("say", "edit", "write", "if_rejected"))
        if "say" in r:
            say = _str(r["say"], "if_rejected.say")
        kinds = [k for k in ("edit", "write") if k in r]
        if len(kinds) > 1:
            raise _Bad("if_rejected: give one of edit or write, not both")
        if kinds:
            alt = _edit_step(line, kinds[0], r[kinds[0]], r.get("if_rejected"))
        elif "if_rejected" in r:
            raise _Bad("if_rejected.if_rejected needs an edit or write beside it")
        if alt is None and say is None:
            raise _Bad("if_rejected needs say, edit or write")
    return Step(line, action, tool, args, alt, say)


def _parse(line: int, obj: Any) -> Step:
    if not isinstance(obj, dict):
        raise _Bad(f"expected a JSON object, got {_kind(obj)}")
    actions = [k for k in obj if k in ACTIONS]
    if len(actions) != 1:
        found = f"found {', '.join(actions)}" if actions else "found none"
        raise _Bad(f"needs exactly one action key ({', '.join(ACTIONS)}); {found}")
    action = actions[0]
    extra = sorted(
        set(obj) - {action} - ({"if_rejected"} if action in ("edit", "write") else set())
    )
    if extra:
        raise _Bad(f"unknown key(s) {', '.join(extra)} beside {action!r}")
    v = obj[action]
    if action == "say":
        return Step(line, action, None, {"text": _str(v, "say")})
    if action == "wait":
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
            raise _Bad(f"wait must be a number of seconds >= 0, got {json.dumps(v)}")
        return Step(line, action, None, {"seconds": float(v)})
    if action == "read":
        if isinstance(v, str):
            return Step(line, action, "read_file", {"path": _str(v, "read")})
        o = _obj(v, "read", ("path",), ("start_line", "end_line"))
        args: dict[str, Any] = {"path": _str(o["path"], "read.path")}
        for k in ("start_line", "end_line"):
            if k in o:
                args[k] = _int(o[k], f"read.{k}")
        return Step(line, action, "read_file", args)
    if action == "list":
        if v is None or v == "":
            return Step(line, action, "list_files", {})
        return Step(line, action, "list_files", {"pattern": _str(v, "list")})
    if action == "grep":
        if isinstance(v, str):
            return Step(line, action, "grep", {"pattern": _str(v, "grep")})
        o = _obj(v, "grep", ("pattern",), ("glob",))
        args = {"pattern": _str(o["pattern"], "grep.pattern")}
        if "glob" in o:
            args["glob"] = _str(o["glob"], "grep.glob")
        return Step(line, action, "grep", args)
    if action in ("edit", "write"):
        return _edit_step(line, action, v, obj.get("if_rejected"))
    if action == "run":
        if v not in ("candidate", "reference"):
            raise _Bad(f'run must be "candidate" or "reference", got {json.dumps(v)}')
        return Step(line, action, f"run_{v}", {})
    if action == "log":
        if isinstance(v, str):
            return Step(line, action, "read_run_log", {"run": _str(v, "log")})
        o = _obj(v, "log", (), ("run", "tail", "grep"))
        args = {}
        if "run" in o:
            args["run"] = _str(o["run"], "log.run")
        if "tail" in o:
            args["tail"] = _int(o["tail"], "log.tail")
        if "grep" in o:
            args["grep"] = _str(o["grep"], "log.grep")
        return Step(line, action, "read_run_log", args)
    # claim
    return Step(line, action, "finish", {"summary": _str(v, "claim")})


def load_script(path: Path | str) -> list[Step]:
    """Parse and check a whole recording; ScriptError lists every malformed line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScriptError(f"{path}: cannot read the recording: {exc}") from None
    steps: list[Step] = []
    errors: list[str] = []
    for no, raw in enumerate(text.splitlines(), 1):
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            errors.append(f"{path.name}:{no}: not valid JSON: {exc.msg} (column {exc.colno})")
            continue
        try:
            steps.append(_parse(no, obj))
        except _Bad as exc:
            errors.append(f"{path.name}:{no}: {exc}")
    if errors:
        raise ScriptError("\n".join(errors))
    if not steps:
        raise ScriptError(f"{path.name}: the recording has no steps")
    return steps


class ScriptedAgent:
    def __init__(
        self,
        path: Path | str,
        *,
        speed: float = 1.0,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        """``speed`` divides every wait (2.0 = twice as fast); 0 or infinity skips waits."""
        self.path = Path(path)
        self.steps = load_script(self.path)  # refused here, before anything runs
        self.label = f"scripted:{self.path.name}"
        self.speed = speed
        self._sleep = sleep
        self.position = 0  # index of the next step; run() continues from here
        self.last_stop = ""  # "claimed" | "end"
        self._calls = 0
        self._announced = False
        self._resume_alt: Step | None = None  # the if_rejected alternative to continue with
        self._resume_say: str | None = None  # an if_rejected "say" cut off by a kill

    def spec(self) -> dict[str, Any]:
        """How to build this agent again: the recording's path, pace and content hash (a
        recording that changed no longer lines up with the log)."""
        p = Path(os.path.abspath(self.path))
        digest = ""
        with contextlib.suppress(OSError):
            digest = hashlib.sha256(p.read_bytes()).hexdigest()
        return {"kind": "scripted", "path": str(p), "speed": self.speed, "sha256": digest}

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> ScriptedAgent:
        path = Path(spec["path"])
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise AgentSpecError(f"the recorded agent {path} is gone: {exc}") from None
        if spec.get("sha256") and hashlib.sha256(data).hexdigest() != spec["sha256"]:
            raise AgentSpecError(f"the recorded agent {path} changed since the session "
                                 "started; its steps no longer line up with the log")
        return cls(path, speed=float(spec.get("speed", 1.0)))

    def restore(self, events: list[ev.Event], host: AgentHost | None = None) -> None:
        """Continue after the last completed step of a killed session's log.

        Walks the recording alongside the agent's events: a ``say`` is done when its text was
        published, a tool step when its call got a result (following ``if_rejected`` chains
        through rejections). A call without a result is made again, so an edit proposed but
        not decided when the engine died is proposed again."""
        del host
        agent = [e for e in events if isinstance(e, ev.AgentText)
                 or (isinstance(e, ev.AgentToolCall | ev.AgentToolResult)
                     and e.call_id.startswith("scripted-"))]
        for e in agent:
            if isinstance(e, ev.AgentToolCall) and (m := _CALL_ID.match(e.call_id)):
                self._calls = max(self._calls, int(m.group(1)))
        results = {e.call_id: e for e in agent if isinstance(e, ev.AgentToolResult)}
        i = 0
        self.position, self._resume_alt, self._resume_say = len(self.steps), None, None
        for idx, step in enumerate(self.steps):
            if step.action == "wait":
                if i < len(agent):
                    continue  # something after it happened, so the wait was over
                self.position = idx
                return
            if step.action == "say":
                if i < len(agent) and isinstance(agent[i], ev.AgentText) and \
                        agent[i].text == step.args["text"]:  # type: ignore[union-attr]
                    i += 1
                    continue
                self.position = idx
                return
            current = step
            while True:
                call = agent[i] if i < len(agent) else None
                if not (isinstance(call, ev.AgentToolCall) and call.name == current.tool):
                    self.position, self._resume_alt = idx, current
                    return
                i += 1
                result = results.get(call.call_id)
                if result is None:
                    self.position, self._resume_alt = idx, current
                    return
                i = max(i, agent.index(result) + 1)
                if current.tool == "finish":
                    self.position, self.last_stop = idx + 1, "claimed"
                    return
                rejected = result.is_error and result.content.startswith(_REJECTED)
                if not rejected or current.tool not in ("propose_edit", "write_file"):
                    break
                if current.say_if_rejected:
                    nxt = agent[i] if i < len(agent) else None
                    if isinstance(nxt, ev.AgentText) and nxt.text == current.say_if_rejected:
                        i += 1
                    elif current.if_rejected is not None:
                        self.position, self._resume_alt = idx, current.if_rejected
                        self._resume_say = current.say_if_rejected
                        return
                if current.if_rejected is None:
                    break
                current = current.if_rejected
        self.last_stop = self.last_stop or "end"

    async def run(self, host: AgentHost) -> None:
        if not self._announced:
            self._announced = True
            host.publish(
                ev.SessionState(
                    session_id=host.session_id,
                    state="agent-scripted",
                    detail=f"replaying the recorded agent {self.path.name} "
                    f"({len(self.steps)} steps); no model is called",
                )
            )
        while self.position < len(self.steps):
            step = self.steps[self.position]
            await host.checkpoint()
            alt, self._resume_alt = self._resume_alt, None
            if alt is not None:
                claimed = await self._continue(host, alt)
            else:
                claimed = await self._do(host, step)
            self.position += 1
            if claimed:
                self.last_stop = "claimed"
                return
        self.last_stop = "end"

    async def _do(self, host: AgentHost, step: Step) -> bool:
        if step.action == "say":
            host.publish(ev.AgentText(session_id=host.session_id, text=step.args["text"]))
            return False
        if step.action == "wait":
            if 0 < self.speed < math.inf and step.args["seconds"] > 0:
                await self._sleep(step.args["seconds"] / self.speed)
            return False
        return await self._continue(host, step)

    async def _continue(self, host: AgentHost, step: Step) -> bool:
        """Make the step's call (or the if_rejected alternative a resume continues with)."""
        if self._resume_say:
            say, self._resume_say = self._resume_say, None
            host.publish(ev.AgentText(session_id=host.session_id, text=say))
        result = await self._call(host, step)
        current = step
        while result.rejected and current.tool in ("propose_edit", "write_file"):
            if current.say_if_rejected:
                host.publish(ev.AgentText(session_id=host.session_id, text=current.say_if_rejected))
            if current.if_rejected is None:
                break
            current = current.if_rejected
            await host.checkpoint()
            result = await self._call(host, current)
        return result.claimed

    async def _call(self, host: AgentHost, step: Step) -> tools.ToolResult:
        assert step.tool is not None
        self._calls += 1
        call_id = f"scripted-{self._calls}-l{step.line}"
        host.publish(
            ev.AgentToolCall(
                session_id=host.session_id, call_id=call_id, name=step.tool, input=dict(step.args)
            )
        )
        result = await tools.execute(host, step.tool, dict(step.args))
        host.publish(
            ev.AgentToolResult(
                session_id=host.session_id,
                call_id=call_id,
                content=result.content,
                is_error=result.is_error,
            )
        )
        return result
