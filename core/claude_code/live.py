"""Claude Code under review: the real `claude` CLI, driven through claude-agent-sdk, in the
agent's workspace copy, with every change and command gated by portside.

The gate is a ``PreToolUse`` hook callback on every tool (SDK hooks run whatever the permission
mode or the user's allow rules say), registered with ``on_failure="block"`` and a timeout of a
week, so the tool runs only when the callback answered "allow":

- Edit / MultiEdit / Write / NotebookEdit: the file's new text is computed here and proposed as
  ``edit.proposed`` (a real diff against the workspace file) through the host, before Claude
  Code touches the file. Approved → allow (the reviewer's version as ``updatedInput``);
  rejected → deny with the reason, which Claude Code hands to the model. ``PostToolUse``
  checks the file holds the approved text (``edit.applied``, or an ``edit-mismatch`` alarm).
- Bash: a ``command.proposed`` (command, description, cwd; not an edit); edited → the edited
  command. An approved command goes through :func:`command_for_run` (the one place the sandbox wraps it).
- Read / Grep / Glob / LS (and Claude Code's own bookkeeping tools): allowed, shown as tool calls.
- A path outside the workspace: denied with a reason and an ``outside-workspace`` alarm.
- Anything else (web, MCP, unknown tools): denied.
If portside dies, the callback never answers; if it raises, ``on_failure`` blocks; if it times
out, the CLI blocks; ``can_use_tool`` (reached only when no hook allowed) denies. No answer = no.

The ``Stop`` hook checks the claim where it is made: the candidate runs under the checks (the
references first if there are none); with error alarms open the stop is blocked with their
evidence as the reason (and ``agent-claim-contradicted`` raised when the last message claims
success), at most ``max_stop_blocks`` times; then, or with no error open, the claim goes to the
host (the reviewer, or the policy) and the session ends.

Only ``ANTHROPIC_API_KEY`` / ``ANTHROPIC_BASE_URL`` (and the CLI's own switches) go to the CLI's
environment; approved commands run with them unset, and the key is scrubbed from every event.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import uuid
from collections.abc import Callable
from typing import Any

from portside.core.agent.base import AgentHost, AgentStopped
from portside.core.agent.stop_check import MAX_STOP_BLOCKS, claims_success, evidence_line
from portside.core.agent.task import default_task
from portside.core.log import events as ev
from portside.core.log.costs import default_prices, token_cost
from portside.core.safety.secrets import redact_agent_event, replace_secrets

EDIT_TOOLS = frozenset({"Edit", "MultiEdit", "Write", "NotebookEdit"})
READ_TOOLS = frozenset({"Read", "Grep", "Glob", "LS", "NotebookRead"})
#: Claude Code's own bookkeeping: no file, no command, no network.
INTERNAL_TOOLS = frozenset({"TodoWrite", "Task", "Agent", "BashOutput", "KillShell",
                            "KillBash", "TaskOutput", "TaskStop", "ExitPlanMode"})
#: Environment the CLI needs; nothing else of portside's own is added to it.
PASS_ENV = ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN")
SECRET_ENV = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")
CLI_SWITCHES = {
    "DISABLE_TELEMETRY": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
}
HOOK_TIMEOUT_S = 7 * 24 * 3600  # a reviewer may take long; the CLI blocks the tool at timeout


def command_for_run(command: str, cwd: str) -> str:
    """The one call site for running an approved agent command: the secrets the CLI holds are
    unset first, then it is wrapped in the session's sandbox (core/run/sandbox.py ``wrap_shell``;
    unchanged where the session has none)."""
    from portside.core.run.sandbox import wrap_shell

    return wrap_shell("unset " + " ".join(SECRET_ENV) + "; " + command, cwd)


def find_cli(cli_path: str | os.PathLike[str] | None = None) -> str | None:
    """``cli_path``, else $PORTSIDE_CLAUDE_CLI, else None (the SDK's bundled CLI)."""
    chosen = cli_path or os.environ.get("PORTSIDE_CLAUDE_CLI") or None
    return str(chosen) if chosen else None


def _allow(updated: dict[str, Any] | None = None, reason: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {"hookEventName": "PreToolUse", "permissionDecision": "allow"}
    if reason:
        out["permissionDecisionReason"] = reason
    if updated is not None:
        out["updatedInput"] = updated
    return {"hookSpecificOutput": out}


def _deny(reason: str) -> dict[str, Any]:
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                   "permissionDecisionReason": reason}}


def result_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for c in content:
            if isinstance(c, dict):
                parts.append(str(c.get("text", "")) if c.get("type") == "text"
                             else f"[{c.get('type', 'block')}]")
            else:
                parts.append(str(c))
        return "\n".join(parts)
    return str(content)


class ClaudeCodeAgent:
    """An Agent (core/agent/base.py) that is a real Claude Code session."""

    session_id: str  # Claude Code's own session id (resumable with `claude --resume`)

    def __init__(
        self,
        model: str | None = None,
        *,
        task: str | None = None,
        cli_path: str | os.PathLike[str] | None = None,
        session_id: str | None = None,
        resume: bool = False,
        max_stop_blocks: int = MAX_STOP_BLOCKS,
        max_turns: int | None = None,
        config_dir: str | os.PathLike[str] | None = None,
        env: dict[str, str] | None = None,
        stderr: Callable[[str], None] | None = None,
    ) -> None:
        self.model = model
        self.label = f"claude-code:{model}" if model else "claude-code"
        self.task = task
        self.cli_path = find_cli(cli_path)
        #: Claude Code's session id: chosen here, so it is in the session's metadata from the
        #: start (and `--resume` continues that conversation).
        self.session_id = session_id or str(uuid.uuid4())
        self.resume = resume
        self.max_stop_blocks = max_stop_blocks
        self.max_turns = max_turns
        self.config_dir = str(config_dir) if config_dir else os.environ.get("CLAUDE_CONFIG_DIR")
        self.extra_env = dict(env or {})
        self._stderr = stderr
        self.stop_blocks = 0
        self.last_stop = ""
        self._done = False
        self._last_text = ""
        self._seen_usage: set[str] = set()
        self._turn_totals: dict[str, int] = {"input": 0, "output": 0, "cache_read": 0,
                                             "cache_write": 0}
        self._turn_cost = 0.0
        self._pending_edit_ids: list[tuple[str, str]] = []  # (path, edit id) approved, not applied
        self._model: str | None = None
        self._client: Any = None
        self._started = False

    # ---- resume ------------------------------------------------------------------------------

    def spec(self) -> dict[str, Any]:
        """How to build this agent again: Claude Code's session id continues the conversation
        (its own transcript holds what ran; nothing is re-applied). No secrets."""
        return {"kind": "claude-code", "model": self.model, "session_id": self.session_id,
                "task": self.task, "cli_path": self.cli_path,
                "max_stop_blocks": self.max_stop_blocks}

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> ClaudeCodeAgent:
        return cls(spec.get("model"), task=spec.get("task"), cli_path=spec.get("cli_path"),
                   session_id=str(spec["session_id"]), resume=True,
                   max_stop_blocks=int(spec.get("max_stop_blocks") or MAX_STOP_BLOCKS))

    def restore(self, events: list[ev.Event], host: AgentHost) -> None:
        """A killed session continues Claude Code's own conversation (SDK ``resume``: its
        transcript holds what ran, so nothing is asked or applied again). An approved edit the
        kill cut off between Claude Code writing it and portside recording it is recorded now
        as ``edit.applied`` when the workspace holds exactly the approved text."""
        self.resume = any(isinstance(e, ev.AgentToolCall | ev.AgentText) for e in events)
        proposed = {e.edit_id: e for e in events
                    if isinstance(e, ev.EditProposed) and ev.is_file_edit(e)}
        applied = {e.edit_id for e in events if isinstance(e, ev.EditApplied)}
        for d in events:
            if not (isinstance(d, ev.EditDecided) and d.decision != "rejected"
                    and d.edit_id in proposed and d.edit_id not in applied):
                continue
            p = proposed[d.edit_id]
            want = d.after if d.decision == "edited" and d.after is not None else p.after
            with contextlib.suppress(Exception):
                if host.workspace.read_file(p.path) == want:
                    self._publish(host, ev.EditApplied(session_id=host.session_id,
                                                       edit_id=d.edit_id, path=p.path))

    # ---- environment and options -----------------------------------------------------------

    def cli_env(self) -> dict[str, str]:
        env = {k: os.environ[k] for k in PASS_ENV if os.environ.get(k)}
        env.update(CLI_SWITCHES)
        if self.config_dir:
            env["CLAUDE_CONFIG_DIR"] = self.config_dir
        env.update(self.extra_env)
        return env

    def _secrets(self) -> list[str]:
        env = self.cli_env()
        return [v for k in SECRET_ENV if len(v := env.get(k, "") or os.environ.get(k, "")) >= 8]

    def _scrub(self, value: Any) -> Any:
        return replace_secrets(value, self._secrets())

    def _publish(self, host: AgentHost, event: ev.Event) -> None:
        host.publish(redact_agent_event(event, self._secrets()))

    def _options(self, host: AgentHost) -> Any:
        from claude_agent_sdk import ClaudeAgentOptions, HookMatcher

        async def pre(inp: Any, tool_use_id: str | None, ctx: Any) -> Any:
            return await self._pre_tool_use(host, dict(inp))

        async def post(inp: Any, tool_use_id: str | None, ctx: Any) -> Any:
            return self._post_tool_use(host, dict(inp))

        async def stop(inp: Any, tool_use_id: str | None, ctx: Any) -> Any:
            return await self._stop(host, dict(inp))

        async def backstop(name: str, tool_input: dict[str, Any], ctx: Any) -> Any:
            from claude_agent_sdk import PermissionResultDeny

            return PermissionResultDeny(message=f"{name}: not approved by portside's review gate")

        kwargs: dict[str, Any] = dict(
            cwd=str(host.workspace.root),
            env=self.cli_env(),
            permission_mode="default",
            can_use_tool=backstop,
            setting_sources=[],  # the user's allow rules and hooks do not apply here
            hooks={
                "PreToolUse": [HookMatcher(hooks=[pre], timeout=HOOK_TIMEOUT_S,
                                           on_failure="block")],
                "PostToolUse": [HookMatcher(hooks=[post])],
                "Stop": [HookMatcher(hooks=[stop], timeout=HOOK_TIMEOUT_S)],
            },
            stderr=self._stderr,
        )
        if self.model:
            kwargs["model"] = self.model
        if self.cli_path:
            kwargs["cli_path"] = self.cli_path
        if self.max_turns:
            kwargs["max_turns"] = self.max_turns
        if self.resume or self._started:
            kwargs["resume"] = self.session_id
        else:
            kwargs["session_id"] = self.session_id
        return ClaudeAgentOptions(**kwargs)

    # ---- the session -------------------------------------------------------------------------

    async def run(self, host: AgentHost) -> None:
        if self._done:
            return
        from claude_agent_sdk import ClaudeSDKClient

        brief = getattr(host, "task", "") or ""
        prompt = "\n\n".join(x for x in (self.task or default_task("tpu"), brief) if x)
        if self.resume or self._started:
            prompt = ("(portside) The session was interrupted and is continuing. Edits already "
                      "applied are in the files; re-read before editing. Continue the port.")
        options = self._options(host)
        self._started = True
        self._publish(host, ev.SessionState(
            session_id=host.session_id, state="agent-running",
            detail=f"Claude Code session {self.session_id} in {host.workspace.root}"))
        async with ClaudeSDKClient(options) as client:
            self._client = client
            watcher = asyncio.create_task(self._watch(host, client))
            try:
                await client.query(prompt)
                async for message in client.receive_response():
                    self._on_message(host, message)
            finally:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await watcher
                self._client = None
        if getattr(host, "stopping", ""):
            raise AgentStopped(host.stopping)  # type: ignore[attr-defined]
        if self._done:
            raise AgentStopped("claimed")
        self.last_stop = "idle"

    async def _watch(self, host: AgentHost, client: Any) -> None:
        """Reviewer messages into the running conversation; abort → interrupt."""
        while True:
            await asyncio.sleep(0.2)
            if getattr(host, "stopping", ""):
                with contextlib.suppress(Exception):
                    await client.interrupt()
                return
            for m in host.take_messages():
                await client.query(f"Message from the reviewer: {m}")

    def _on_message(self, host: AgentHost, message: Any) -> None:
        from claude_agent_sdk import (
            AssistantMessage,
            ResultMessage,
            SystemMessage,
            TextBlock,
            ToolResultBlock,
            ToolUseBlock,
            UserMessage,
        )

        sid = host.session_id
        if isinstance(message, SystemMessage):
            if message.subtype == "init":
                data = message.data
                self.session_id = str(data.get("session_id") or self.session_id)
                self._publish(host, ev.SessionState(
                    session_id=sid, state="agent-running",
                    detail=f"Claude Code {data.get('claude_code_version', '')} session "
                    f"{self.session_id}, model {data.get('model')}, cwd {data.get('cwd')}"))
            return
        if isinstance(message, AssistantMessage):
            sub = message.parent_tool_use_id
            label = f"[subagent {sub}] " if sub else ""
            for block in message.content:
                if isinstance(block, TextBlock) and block.text.strip():
                    if not sub:
                        self._last_text = block.text
                    self._publish(host, ev.AgentText(session_id=sid, text=label + block.text))
                elif isinstance(block, ToolUseBlock):
                    data = dict(block.input)
                    if sub:
                        data["_subagent_of"] = sub
                    self._publish(host, ev.AgentToolCall(session_id=sid, call_id=block.id,
                                                         name=block.name, input=data))
            self._usage(host, message)
            return
        if isinstance(message, UserMessage) and isinstance(message.content, list):
            for block in message.content:
                if isinstance(block, ToolResultBlock):
                    self._publish(host, ev.AgentToolResult(
                        session_id=sid, call_id=block.tool_use_id,
                        content=result_text(block.content), is_error=bool(block.is_error)))
            return
        if isinstance(message, ResultMessage):
            self._result_usage(host, message)

    def _usage(self, host: AgentHost, message: Any) -> None:
        """One ``agent.usage`` per API reply (Claude Code sends a reply's blocks as several
        messages with the same id and usage)."""
        u = message.usage or {}
        mid = message.message_id or ""
        if not u or (mid and mid in self._seen_usage):
            return
        self._seen_usage.add(mid)
        i, o = int(u.get("input_tokens") or 0), int(u.get("output_tokens") or 0)
        cr = int(u.get("cache_read_input_tokens") or 0)
        cw = int(u.get("cache_creation_input_tokens") or 0)
        cost = token_cost(message.model, i, o, default_prices(), cache_read=cr,
                          cache_write=cw) or 0.0
        t = self._turn_totals
        t["input"] += i
        t["output"] += o
        t["cache_read"] += cr
        t["cache_write"] += cw
        self._turn_cost += cost
        self._model = message.model
        self._publish(host, ev.AgentUsage(session_id=host.session_id, model=message.model,
                                          input_tokens=i, output_tokens=o, cache_read_tokens=cr,
                                          cache_write_tokens=cw, cost_usd=cost))

    def _result_usage(self, host: AgentHost, message: Any) -> None:
        """The result's totals and ``total_cost_usd``: what the per-reply events did not count
        (streamed output tokens, Claude Code's own side calls) as one more ``agent.usage``, so
        the session's sums equal Claude Code's."""
        u = message.usage or {}
        t = self._turn_totals
        rest = {
            "input": max(0, int(u.get("input_tokens") or 0) - t["input"]),
            "output": max(0, int(u.get("output_tokens") or 0) - t["output"]),
            "cache_read": max(0, int(u.get("cache_read_input_tokens") or 0) - t["cache_read"]),
            "cache_write": max(0, int(u.get("cache_creation_input_tokens") or 0)
                               - t["cache_write"]),
        }
        total = float(message.total_cost_usd or 0.0)
        cost = max(0.0, total - self._turn_cost)
        model = self._model or self.model or "claude-code"
        if any(rest.values()) or cost > 0:
            self._publish(host, ev.AgentUsage(
                session_id=host.session_id, model=model, input_tokens=rest["input"],
                output_tokens=rest["output"], cache_read_tokens=rest["cache_read"],
                cache_write_tokens=rest["cache_write"], cost_usd=cost))
            for k, v in rest.items():
                t[k] += v
            self._turn_cost += cost
        self._publish(host, ev.SessionState(
            session_id=host.session_id, state="agent-result",
            detail=f"Claude Code {message.subtype}: {message.num_turns} turns, "
            f"{message.duration_ms / 1000:.1f} s, total_cost_usd {total:.4f}"
            + (f", {len(message.permission_denials)} permission denial(s)"
               if message.permission_denials else "")))

    # ---- the gate ----------------------------------------------------------------------------

    def _inside(self, host: AgentHost, path: str, cwd: str) -> str | None:
        """``path`` relative to the workspace root, or None when it leaves the workspace."""
        root = os.path.realpath(host.workspace.root)
        full = os.path.realpath(os.path.join(cwd or root, os.path.expanduser(path)))
        if full != root and not full.startswith(root + os.sep):
            return None
        return os.path.relpath(full, root)

    def _outside(self, host: AgentHost, tool: str, path: str) -> dict[str, Any]:
        reason = (f"{tool} {path}: outside the workspace {host.workspace.root}; portside allows "
                  "reads and changes only inside it")
        from portside.core.checks import Alarm
        from portside.core.checks.evidence import OutsideWorkspace

        self._publish(host, Alarm("outside-workspace", "warning",
                                  f"agent tried {tool} outside the workspace: {path}",
                                  OutsideWorkspace(tool=tool, path=path)).raised(host.session_id))
        return _deny(reason)

    async def _pre_tool_use(self, host: AgentHost, inp: dict[str, Any]) -> dict[str, Any]:
        name = str(inp.get("tool_name") or "")
        try:
            await host.checkpoint()  # paused: nothing is granted until the reviewer resumes
            return await self._decide(host, name, dict(inp.get("tool_input") or {}),
                                      str(inp.get("tool_use_id") or ""), str(inp.get("cwd") or ""))
        except AgentStopped as exc:
            return _deny(f"the review session is ending ({exc}); nothing more runs")
        except Exception as exc:  # a gate that cannot decide says no
            return _deny(f"portside's review gate failed on {name} ({type(exc).__name__}: {exc}); "
                         "not run")

    async def _decide(self, host: AgentHost, name: str, ti: dict[str, Any], call_id: str,
                      cwd: str) -> dict[str, Any]:
        if name in READ_TOOLS or name in EDIT_TOOLS:
            path = ti.get("file_path") or ti.get("notebook_path") or ti.get("path") or "."
            rel = self._inside(host, str(path), cwd)
            if rel is None:
                return self._outside(host, name, str(path))
            if name in READ_TOOLS:
                return _allow()
            return await self._gate_edit(host, name, ti, rel)
        if name == "Bash":
            return await self._gate_command(host, ti, cwd)
        if name in INTERNAL_TOOLS:
            return _allow()
        return _deny(f"{name} is not available in a portside review session (no network, no "
                     "extra tools); use Read, Grep, Glob, Edit, Write and Bash")

    def _new_text(self, host: AgentHost, name: str, ti: dict[str, Any], rel: str) -> str:
        """The file's text once the tool ran: what the reviewer sees as a diff."""
        from portside.core.workspace.names import WorkspaceError

        if name == "Write":
            return str(ti.get("content", ""))
        try:
            text = host.workspace.read_file(rel)
        except WorkspaceError:
            if name == "NotebookEdit":
                raise
            text = None
        if name == "NotebookEdit":
            return _notebook_after(text or "", ti)
        edits = ti.get("edits") if name == "MultiEdit" else [ti]
        if text is None:
            if edits and not edits[0].get("old_string"):
                text = ""  # Claude Code creates a file from an Edit with an empty old_string
            else:
                raise ValueError(f"{rel} does not exist")
        for e in edits or []:
            old, new = str(e.get("old_string", "")), str(e.get("new_string", ""))
            if not old:
                if text:
                    raise ValueError(f"empty old_string for {rel}, which is not empty")
                text = new
                continue
            count = text.count(old)
            if count == 0 and new and new in text:
                raise ValueError(f"old_string not found in {rel}; its new_string is there "
                                 "already (an edit applied before is not applied again)")
            if count == 0:
                raise ValueError(f"old_string not found in {rel}")
            if count > 1 and not e.get("replace_all"):
                raise ValueError(f"old_string occurs {count} times in {rel}; "
                                 "give more context or replace_all")
            text = text.replace(old, new) if e.get("replace_all") else text.replace(old, new, 1)
        return text

    async def _gate_edit(self, host: AgentHost, name: str, ti: dict[str, Any],
                         rel: str) -> dict[str, Any]:
        try:
            after = self._new_text(host, name, ti, rel)
        except (ValueError, KeyError, TypeError) as exc:
            return _deny(f"{name} not proposed: {exc}")
        except Exception as exc:
            return _deny(f"{name} not proposed: {exc}")
        if host.workspace.exists(rel) and host.workspace.read_file(rel) == after:
            # Nothing to decide: typically an edit applied before a kill, asked for again.
            return _deny(f"{name} not proposed: {rel} already holds this text (an edit applied "
                         "before is not applied again); re-read it")
        review = getattr(host, "review_tool_edit", None)
        if review is None:
            return _deny("this portside host cannot review edits made by Claude Code")
        rationale = str(ti.get("description") or "") or f"{name} by Claude Code"
        outcome = await review(rel, after, rationale)
        if outcome.status == "rejected":
            return _deny(f"The reviewer rejected this {name} of {rel}: {outcome.message}")
        if outcome.status != "approved":
            return _deny(f"{name} of {rel} not proposed: {outcome.message}")
        self._pending_edit_ids.append((rel, outcome.edit_id))
        if outcome.applied_text is None:
            return _allow(reason="approved by the reviewer")
        text = outcome.applied_text
        path = str(ti.get("file_path") or ti.get("notebook_path"))
        if name == "NotebookEdit":
            return _deny(f"The reviewer changed this notebook edit; write {rel} with Write and "
                         f"this content instead:\n{text}")
        before = host.workspace.read_file(rel) if host.workspace.exists(rel) else ""
        if name == "Write" or not before:
            return _allow({"file_path": path, "content": text},
                          "approved with the reviewer's changes")
        updated = {"file_path": path, "old_string": before, "new_string": text,
                   "replace_all": False}
        if name == "MultiEdit":
            updated = {"file_path": path, "edits": [{"old_string": before, "new_string": text}]}
        return _allow(updated, "approved with the reviewer's changes")

    def _post_tool_use(self, host: AgentHost, inp: dict[str, Any]) -> dict[str, Any]:
        name = str(inp.get("tool_name") or "")
        if name not in EDIT_TOOLS or not self._pending_edit_ids:
            return {}
        ti = dict(inp.get("tool_input") or {})
        path = str(ti.get("file_path") or ti.get("notebook_path") or "")
        rel = self._inside(host, path, str(inp.get("cwd") or ""))
        for i, (r, edit_id) in enumerate(self._pending_edit_ids):
            if r == rel:
                del self._pending_edit_ids[i]
                done = getattr(host, "tool_edit_done", None)
                why = done(edit_id) if done else ""
                if why:
                    return {"hookSpecificOutput": {"hookEventName": "PostToolUse",
                                                   "additionalContext": f"(portside) {why}"}}
                break
        return {}

    async def _gate_command(self, host: AgentHost, ti: dict[str, Any], cwd: str) -> dict[str, Any]:
        command = str(ti.get("command") or "")
        if not command.strip():
            return _deny("empty command")
        propose = getattr(host, "propose_command", None)
        if propose is None:
            return _deny("this portside host cannot review commands")
        where = cwd or str(host.workspace.root)
        if self._inside(host, where, "") is None:
            return self._outside(host, "Bash (cwd)", where)
        outcome = await propose(command, str(ti.get("description") or ""), where)
        if outcome.status == "rejected":
            return _deny(f"The reviewer rejected this command: {outcome.message}")
        if outcome.status != "approved":
            return _deny(f"command not run: {outcome.message}")
        final = outcome.applied_text or command
        updated = {**ti, "command": command_for_run(final, where), "run_in_background": False}
        return _allow(updated, "approved by the reviewer" if outcome.applied_text is None
                      else f"the reviewer changed the command to: {final}")

    # ---- the claim, checked at Stop ----------------------------------------------------------

    async def _stop(self, host: AgentHost, inp: dict[str, Any]) -> dict[str, Any]:
        last = str(inp.get("last_assistant_message") or self._last_text or "")
        try:
            if self._done:
                return {}
            await host.checkpoint()
            if getattr(host, "has_references", True) is False:
                await host.run_reference()
            summary = await host.run_candidate()
            errors = host.open_errors() if hasattr(host, "open_errors") else []  # type: ignore[attr-defined]
            if errors and self.stop_blocks < self.max_stop_blocks:
                self.stop_blocks += 1
                evidence = "; ".join(evidence_line(c, t, e) for c, t, e in errors
                                     if c != "agent-claim-contradicted")
                if claims_success(last):
                    self._contradicted(host, last, errors)
                reason = (f"portside ran your version under the checks and error alarms are open: "
                          f"{evidence}. Run summary: {summary}. Fix this (the numerics must match "
                          "the reference) before you stop, or say plainly what you could not fix.")
                self._publish(host, ev.SessionState(
                    session_id=host.session_id, state="agent-stop-blocked",
                    detail=f"stop {self.stop_blocks} of {self.max_stop_blocks} blocked: {evidence}"))
                return {"decision": "block", "reason": self._scrub(reason)}
            # No error open, or blocked often enough: the reviewer (or the policy) decides.
            self._done = True
            await host.claim(last or "(Claude Code stopped without a final message)")
            return {}
        except AgentStopped:
            self._done = True
            return {}
        except Exception as exc:  # never leave Claude Code hanging on a broken check
            self._done = True
            self._publish(host, ev.SessionState(
                session_id=host.session_id, state="agent-error",
                detail=f"the Stop check failed: {type(exc).__name__}: {exc}"))
            return {}

    def _contradicted(self, host: AgentHost, claim: str,
                      errors: list[tuple[str, str, dict[str, Any]]]) -> None:
        from portside.core.checks import agent_claim_contradicted

        if any(c == "agent-claim-contradicted" for c, _, _ in errors):
            return  # already open: one is enough
        others = [(c, t) for c, t, _ in errors]
        a = agent_claim_contradicted(claim, [], ", ".join(c for c, _ in others),
                                     severity="critical", at="Stop hook", open_alarms=others)
        self._publish(host, a.raised(host.session_id))


def _notebook_after(text: str, ti: dict[str, Any]) -> str:
    """NotebookEdit's effect on the .ipynb JSON: replace / insert / delete one cell."""
    nb: dict[str, Any] = json.loads(text) if text.strip() else {
        "cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    cells: list[dict[str, Any]] = nb.setdefault("cells", [])
    cell_id = ti.get("cell_id")
    mode = ti.get("edit_mode") or "replace"
    idx = next((i for i, c in enumerate(cells) if c.get("id") == cell_id), None)
    if idx is None and isinstance(cell_id, str) and cell_id.startswith("cell-"):
        with contextlib.suppress(ValueError):
            idx = int(cell_id[5:])
    source = str(ti.get("new_source", ""))
    kind = ti.get("cell_type") or (cells[idx].get("cell_type") if idx is not None
                                   and idx < len(cells) else "code")
    new_cell: dict[str, Any] = {"cell_type": kind, "metadata": {}, "source": source}
    if kind == "code":
        new_cell.update(outputs=[], execution_count=None)
    if mode == "insert":
        cells.insert(0 if idx is None else idx + 1, new_cell)
    elif idx is None or idx >= len(cells):
        raise ValueError(f"notebook cell {cell_id!r} not found")
    elif mode == "delete":
        del cells[idx]
    else:
        cells[idx] = {**cells[idx], "source": source, **({"cell_type": kind} if kind else {})}
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


__all__ = ["ClaudeCodeAgent", "claims_success", "command_for_run"]
