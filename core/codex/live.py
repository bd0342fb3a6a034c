"""Codex under review: the real Codex CLI driven through ``codex app-server`` (JSON-RPC 2.0,
one JSON object a line over stdio) in portside's workspace copy.

The thread starts with ``approvalPolicy: "untrusted"`` (Codex asks before every command and
patch) and Codex's own ``workspace-write`` sandbox. Each ask is answered by portside's gate:

- ``item/fileChange/requestApproval``: the patch's diffs (sent just before, in the
  ``item/started`` of the same item) applied to the workspace files here give each file's new
  text, proposed as ``edit.proposed`` (a real diff) before Codex writes anything. Approved →
  accept, and once the item completes the file must hold that text (``edit.applied`` or an
  ``edit-mismatch`` alarm); rejected → decline.
- ``item/commandExecution/requestApproval``: a ``command.proposed``; approved → accept.
The decision has no reason field, so a rejection's reason (or the reviewer's edited version)
reaches the model as a ``turn/steer`` message sent before the decline. No answer = no: when
portside dies, Codex's pipe closes and it exits; an error in the gate declines.

The reader never dies quietly: a line over :data:`MAX_LINE`, one that is not a JSON object, the
pipe's end or any error reading ends the turn at once, and the session ends on
``agent API error: <why>`` (a reviewer may resume: a new app-server and thread on the
workspace as it is), never a turn that waits forever.

When a turn completes, its last message is the claim, checked as Claude Code's is
(core/agent/stop_check.py): error alarms open → a new turn with the evidence, at most
``max_stop_blocks`` times, then the claim goes to the reviewer. Usage comes from
``thread/tokenUsage/updated``. The user's own CODEX_HOME (its provider, e.g. a gateway) is used;
values of secret-looking variables are scrubbed from every event.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from portside.core.agent.base import AgentAPIError, AgentHost, AgentStopped, EditOutcome
from portside.core.agent.stop_check import MAX_STOP_BLOCKS
from portside.core.agent.task import default_task
from portside.core.log import events as ev
from portside.core.safety.secrets import redact_agent_event, replace_secrets

HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
# One JSON-RPC line at most (the pipe's buffer bound too). Codex's own messages are far
# smaller (it truncates command output); a line past it ends the turn rather than the reader.
MAX_LINE = 16 * 1024 * 1024


class CodexError(Exception):
    """The Codex CLI is missing, or its app-server broke the protocol."""


def find_codex(cli_path: str | os.PathLike[str] | None = None) -> str | None:
    """``cli_path``, else $PORTSIDE_CODEX_CLI, else ``codex`` on PATH; None when none."""
    chosen = cli_path or os.environ.get("PORTSIDE_CODEX_CLI") or shutil.which("codex")
    return str(chosen) if chosen else None


def native_binary(cli: str) -> str:
    """The platform binary behind npm's node wrapper (``bin/codex.js``): Codex's sandbox
    helper is that binary under the name ``codex-linux-sandbox``."""
    real = Path(os.path.realpath(cli))
    if real.suffix != ".js":
        return str(real)
    found = sorted(real.parent.parent.parent.glob("codex-*/vendor/*/bin/codex")) + sorted(
        real.parent.parent.glob("vendor/*/codex/codex"))
    return str(found[0]) if found else str(real)


def apply_diff(before: str, diff: str) -> str:
    """``before`` with a unified diff's hunks applied (Codex's fileChange ``diff``: hunks only,
    no file headers). Raises ValueError when a hunk does not match."""
    lines = before.splitlines(keepends=True)
    out: list[str] = []
    pos = 0
    hunk: list[str] = []
    start = -1

    def flush() -> None:
        nonlocal pos
        if start < 0:
            return
        at = max(0, start - 1) if start > 0 else 0
        if at < pos:
            raise ValueError("overlapping hunks")
        out.extend(lines[pos:at])
        pos = at
        for h in hunk:
            tag, body = h[:1], h[1:]
            if tag in (" ", "-"):
                if pos >= len(lines) or lines[pos].rstrip("\r\n") != body.rstrip("\r\n"):
                    raise ValueError(f"hunk at line {start} does not match the file")
                if tag == " ":
                    out.append(lines[pos])
                pos += 1
            elif tag == "+":
                out.append(body)
    for raw in diff.splitlines(keepends=True):
        m = HUNK.match(raw)
        if m:
            flush()
            start, hunk = int(m.group(1)), []
            continue
        if raw.startswith("\\"):  # "\ No newline at end of file"
            if hunk:
                hunk[-1] = hunk[-1].rstrip("\r\n")
            continue
        if start >= 0 and raw[:1] in (" ", "-", "+"):
            hunk.append(raw if raw.endswith("\n") else raw + "\n")
    flush()
    out.extend(lines[pos:])
    return "".join(out)


class CodexAgent:
    """An Agent (core/agent/base.py) that is a real Codex session."""

    def __init__(self, model: str | None = None, *, task: str | None = None,
                 cli_path: str | os.PathLike[str] | None = None,
                 max_stop_blocks: int = MAX_STOP_BLOCKS, thread_id: str | None = None) -> None:
        self.model = model
        self.label = f"codex:{model}" if model else "codex"
        self.task = task
        self.cli_path = find_codex(cli_path)
        self.max_stop_blocks = max_stop_blocks
        self.thread_id = thread_id or ""
        self.rollout = ""
        self.stop_blocks = 0
        self._done = False
        self._proc: asyncio.subprocess.Process | None = None
        self._next_id = 0
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._changes: dict[str, list[dict[str, Any]]] = {}  # item id → its diffs
        self._approved: dict[str, list[str]] = {}  # item id → edit ids approved for it
        self._turn_id = ""
        self._turn_done: asyncio.Event | None = None
        self._last_text = ""
        self._secrets = [v for k, v in os.environ.items()
                         if len(v) >= 8 and re.search(r"KEY|TOKEN|SECRET|PASSWORD", k.upper())]
        self._tasks: set[asyncio.Task[Any]] = set()
        self._broken = ""  # why the reader stopped ("" while it reads)

    # ---- the Agent protocol ------------------------------------------------------------------

    def spec(self) -> dict[str, Any]:
        return {"kind": "codex", "model": self.model, "task": self.task,
                "cli_path": self.cli_path, "max_stop_blocks": self.max_stop_blocks,
                "thread_id": self.thread_id}

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> CodexAgent:
        return cls(spec.get("model"), task=spec.get("task"), cli_path=spec.get("cli_path"),
                   max_stop_blocks=int(spec.get("max_stop_blocks") or MAX_STOP_BLOCKS),
                   thread_id=spec.get("thread_id") or None)

    def restore(self, events: list[ev.Event], host: AgentHost) -> None:
        """A killed session starts a new Codex thread on the workspace as it is (edits applied
        before the kill are in the files; the thread id recorded is only a pointer)."""

    def _scrub(self, value: Any) -> Any:
        return replace_secrets(value, self._secrets)

    def _publish(self, host: AgentHost, event: ev.Event) -> None:
        host.publish(redact_agent_event(event, self._secrets))

    # ---- JSON-RPC ----------------------------------------------------------------------------

    async def _send(self, obj: dict[str, Any]) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.write((json.dumps({"jsonrpc": "2.0", **obj}) + "\n").encode())
        await self._proc.stdin.drain()

    async def _call(self, method: str, params: dict[str, Any]) -> Any:
        if self._broken:  # nobody would read the answer
            raise CodexError(self._broken)
        self._next_id += 1
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[self._next_id] = fut
        await self._send({"id": self._next_id, "method": method, "params": params})
        return await fut

    async def _read(self, host: AgentHost) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        try:
            reason = await self._read_lines(host, self._proc.stdout)
        except Exception as exc:  # a message that broke the dispatch: the turn still ends
            reason = f"portside's Codex reader failed: {type(exc).__name__}: {exc}"
        if reason == "exited":
            with contextlib.suppress(TimeoutError):  # its exit status, when it has one
                await asyncio.wait_for(self._proc.wait(), 2)
            code = self._proc.returncode
            reason = "codex app-server exited" + (f" (status {code})" if code is not None
                                                  else " (its stdout closed)")
        self._broken = reason
        for fut in self._waiting.values():
            if not fut.done():
                fut.set_exception(CodexError(reason))
        self._waiting.clear()
        if self._turn_done is not None:
            self._turn_done.set()

    async def _read_lines(self, host: AgentHost, stdout: asyncio.StreamReader) -> str:
        """Dispatch messages until the stream fails; why it stopped ("exited": its end)."""
        no = 0
        while True:
            try:
                line = await stdout.readuntil(b"\n")
            except asyncio.IncompleteReadError as exc:
                return "exited" if not exc.partial.strip() else \
                    "codex app-server exited in the middle of a line"
            except asyncio.LimitOverrunError:
                return f"codex app-server sent a line over {MAX_LINE // 2**20} MiB (not read)"
            no += 1
            if not line.strip():
                continue
            try:
                msg = json.loads(line)
            except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
                return (f"codex app-server broke the protocol: line {no} is not JSON "
                        f"({type(exc).__name__}: {str(exc)[:120]})")
            if not isinstance(msg, dict):
                return f"codex app-server broke the protocol: line {no} is not a JSON object"
            if "method" in msg and "id" in msg:  # a request from the server: an approval
                task = asyncio.create_task(self._answer(host, msg))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            elif "method" in msg:
                params = msg.get("params") or {}
                if not isinstance(params, dict):
                    return (f"codex app-server broke the protocol: line {no}: params of "
                            f"{str(msg['method'])[:80]!r} is not an object")
                self._notified(host, str(msg["method"]), params)
            elif msg.get("id") in self._waiting:
                fut = self._waiting.pop(msg["id"])
                if "error" in msg:
                    fut.set_exception(CodexError(f"codex app-server: {msg['error']}"))
                else:
                    fut.set_result(msg.get("result"))

    # ---- the session -------------------------------------------------------------------------

    def _env(self, bindir: Path) -> dict[str, str]:
        env = dict(os.environ)
        env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
        return env

    async def run(self, host: AgentHost) -> None:
        if self._done:
            return
        if not self.cli_path:
            raise CodexError("the Codex CLI was not found: install it (npm install -g "
                             "@openai/codex) or set PORTSIDE_CODEX_CLI")
        root = str(host.workspace.root)
        with tempfile.TemporaryDirectory(prefix="portside-codex-") as tmp:
            # Codex's sandbox re-executes its binary as codex-linux-sandbox, found on PATH.
            bindir = Path(tmp)
            (bindir / "codex-linux-sandbox").symlink_to(native_binary(self.cli_path))
            self._broken = ""
            self._waiting, self._changes, self._approved = {}, {}, {}
            self._proc = await asyncio.create_subprocess_exec(
                self.cli_path, "app-server", cwd=root, env=self._env(bindir),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL, limit=MAX_LINE)
            reader = asyncio.create_task(self._read(host))
            failed: Exception | None = None
            try:
                await self._session(host, root)
            except (CodexError, OSError) as exc:  # OSError: the pipe lost under a write
                failed = exc
            finally:
                if failed is not None and not self._broken:
                    # The reader sees the same end a moment later: let it name the reason.
                    with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                        await asyncio.wait_for(asyncio.shield(reader), 5)
                broken = self._broken  # before the terminate below ends the reader too
                if self._proc.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        self._proc.terminate()
                    try:
                        await asyncio.wait_for(self._proc.wait(), 10)
                    except TimeoutError:
                        self._proc.kill()
                        await self._proc.wait()
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await reader
        if getattr(host, "stopping", ""):
            raise AgentStopped(host.stopping)  # type: ignore[attr-defined]
        if self._done:
            raise AgentStopped("claimed")
        if broken:  # the turn ended because the reader did: a classified end, named
            self._publish(host, ev.SessionState(session_id=host.session_id,
                                                state="agent-error", detail=broken))
            raise AgentAPIError(broken)
        if failed is not None:
            raise failed  # an error answer from a server still reading: as before

    async def _session(self, host: AgentHost, root: str) -> None:
        await self._call("initialize", {"clientInfo": {"name": "portside", "version": "1"}})
        await self._send({"method": "initialized", "params": {}})
        params: dict[str, Any] = {"cwd": root, "approvalPolicy": "untrusted",
                                  "sandbox": "workspace-write"}
        if self.model:
            params["model"] = self.model
        started = await self._call("thread/start", params)
        thread = (started or {}).get("thread") or {}
        self.thread_id = str(thread.get("id") or "")
        self.rollout = str(thread.get("path") or "")
        self._publish(host, ev.SessionState(
            session_id=host.session_id, state="agent-running",
            detail=f"Codex thread {self.thread_id} in {root} (approval: untrusted, sandbox: "
            f"workspace-write){', rollout ' + self.rollout if self.rollout else ''}"))
        brief = getattr(host, "task", "") or ""
        prompt = "\n\n".join(x for x in (self.task or default_task("tpu"), brief) if x)
        while True:
            await self._turn(host, prompt)
            if getattr(host, "stopping", "") or self._proc is None or self._broken \
                    or self._proc.returncode is not None:
                return
            from portside.core.agent.stop_check import refuse_stop

            try:
                await host.checkpoint()
                reason = await refuse_stop(host, self._last_text, self.stop_blocks,
                                           self.max_stop_blocks,
                                           lambda e: self._publish(host, e))
                if reason:
                    self.stop_blocks += 1
                    prompt = self._scrub(reason)
                    continue
                self._done = True
                await host.claim(self._last_text or "(Codex ended its turn without a message)")
            except AgentStopped:
                self._done = True
            return

    async def _turn(self, host: AgentHost, text: str) -> None:
        self._turn_done = asyncio.Event()
        res = await self._call("turn/start", {"threadId": self.thread_id,
                                              "input": [{"type": "text", "text": text}]})
        self._turn_id = str(((res or {}).get("turn") or {}).get("id") or "")
        watcher = asyncio.create_task(self._watch(host))
        try:
            await self._turn_done.wait()
        finally:
            watcher.cancel()

    async def _watch(self, host: AgentHost) -> None:
        """Reviewer messages into the running turn; abort → interrupt."""
        while True:
            await asyncio.sleep(0.2)
            if getattr(host, "stopping", ""):
                with contextlib.suppress(Exception):
                    await self._call("turn/interrupt", {"threadId": self.thread_id,
                                                        "turnId": self._turn_id})
                return
            for m in host.take_messages():
                await self._steer(f"Message from the reviewer: {m}")

    async def _steer(self, text: str) -> None:
        with contextlib.suppress(CodexError):
            await self._call("turn/steer", {"threadId": self.thread_id,
                                            "expectedTurnId": self._turn_id,
                                            "input": [{"type": "text", "text": text}]})

    # ---- what Codex says ---------------------------------------------------------------------

    def _notified(self, host: AgentHost, method: str, p: dict[str, Any]) -> None:
        sid = host.session_id
        item = p.get("item") or {}
        kind = item.get("type")
        if method == "item/started" and kind == "fileChange":
            self._changes[str(item.get("id"))] = list(item.get("changes") or [])
            self._publish(host, ev.AgentToolCall(
                session_id=sid, call_id=str(item.get("id")), name="apply_patch",
                input={"changes": [{"path": c.get("path"), "diff": c.get("diff")}
                                   for c in item.get("changes") or []]}))
        elif method == "item/started" and kind == "commandExecution":
            self._publish(host, ev.AgentToolCall(
                session_id=sid, call_id=str(item.get("id")), name="exec_command",
                input={"command": item.get("command"), "cwd": item.get("cwd")}))
        elif method == "item/completed" and kind == "agentMessage":
            text = str(item.get("text") or "")
            if text.strip():
                self._last_text = text
                self._publish(host, ev.AgentText(session_id=sid, text=text))
        elif method == "item/completed" and kind == "commandExecution":
            self._publish(host, ev.AgentToolResult(
                session_id=sid, call_id=str(item.get("id")),
                content=str(item.get("aggregatedOutput") or item.get("status") or ""),
                is_error=item.get("status") != "completed" or bool(item.get("exitCode"))))
        elif method == "item/completed" and kind == "fileChange":
            status = str(item.get("status") or "")
            self._publish(host, ev.AgentToolResult(
                session_id=sid, call_id=str(item.get("id")), content=f"patch {status}",
                is_error=status != "completed"))
            done = getattr(host, "tool_edit_done", None)
            for edit_id in self._approved.pop(str(item.get("id")), []):
                if done is not None and status == "completed":
                    done(edit_id)
        elif method == "thread/tokenUsage/updated":
            self._usage(host, (p.get("tokenUsage") or {}).get("last") or {})
        elif method == "turn/completed" and self._turn_done is not None:
            self._turn_done.set()

    def _usage(self, host: AgentHost, last: dict[str, Any]) -> None:
        from portside.core.log.costs import token_cost

        cached = int(last.get("cachedInputTokens") or 0)
        i = max(0, int(last.get("inputTokens") or 0) - cached)  # OpenAI counts cached inside
        o = int(last.get("outputTokens") or 0)
        model = self.model or "codex"
        cost = token_cost(model, i, o, host.prices, cache_read=cached) or 0.0
        self._publish(host, ev.AgentUsage(session_id=host.session_id, model=model,
                                          input_tokens=i, output_tokens=o,
                                          cache_read_tokens=cached, cost_usd=cost))

    # ---- the gate ----------------------------------------------------------------------------

    async def _answer(self, host: AgentHost, msg: dict[str, Any]) -> None:
        method, p = str(msg["method"]), msg.get("params") or {}
        try:
            await host.checkpoint()
            if method == "item/fileChange/requestApproval":
                decision = await self._gate_patch(host, str(p.get("itemId")))
            elif method == "item/commandExecution/requestApproval":
                decision = await self._gate_command(host, p)
            else:  # anything else asked (network, permissions, MCP): no
                decision = "decline"
        except AgentStopped:
            decision = "cancel"
        except Exception as exc:  # a gate that cannot decide says no
            self._publish(host, ev.SessionState(
                session_id=host.session_id, state="agent-error",
                detail=f"portside's gate failed on {method}: {type(exc).__name__}: {exc}"))
            decision = "decline"
        with contextlib.suppress(Exception):
            await self._send({"id": msg["id"], "result": {"decision": decision}})

    def _rel(self, host: AgentHost, path: str) -> str | None:
        root = os.path.realpath(host.workspace.root)
        full = os.path.realpath(os.path.join(root, path))
        if full != root and not full.startswith(root + os.sep):
            return None
        return os.path.relpath(full, root)

    async def _gate_patch(self, host: AgentHost, item_id: str) -> str:
        review = getattr(host, "review_tool_edit", None)
        if review is None:
            return "decline"
        proposals: list[tuple[str, str]] = []
        for c in self._changes.get(item_id, []):
            rel = self._rel(host, str(c.get("path") or ""))
            if rel is None:
                await self._steer(f"(portside) {c.get('path')} is outside the workspace; "
                                  "changes are allowed only inside it")
                return "decline"
            kind = (c.get("kind") or {}).get("type") if isinstance(c.get("kind"), dict) \
                else c.get("kind")
            diff = str(c.get("diff") or "")
            before = host.workspace.read_file(rel) if host.workspace.exists(rel) else ""
            if kind == "add" and not diff.startswith("@@"):
                after = diff
            elif kind == "delete":
                after = ""
            else:
                try:
                    after = apply_diff(before, diff)
                except ValueError as exc:
                    await self._steer(f"(portside) the patch of {rel} was not proposed: {exc}")
                    return "decline"
            proposals.append((rel, after))
        if not proposals:
            return "decline"
        approved: list[str] = []
        for rel, after in proposals:
            outcome: EditOutcome = await review(rel, after, f"apply_patch by Codex ({rel})")
            if outcome.status == "rejected":
                await self._steer(f"(portside) The reviewer rejected your patch of {rel}: "
                                  f"{outcome.message}")
                return "decline"
            if outcome.status != "approved":
                await self._steer(f"(portside) the patch of {rel} was not applied: "
                                  f"{outcome.message}")
                return "decline"
            if outcome.applied_text is not None:
                await self._steer(f"(portside) The reviewer changed your patch of {rel}; write "
                                  f"exactly this content to it instead:\n{outcome.applied_text}")
                return "decline"
            approved.append(outcome.edit_id)
        self._approved[item_id] = approved
        return "accept"

    async def _gate_command(self, host: AgentHost, p: dict[str, Any]) -> str:
        propose = getattr(host, "propose_command", None)
        command = str(p.get("command") or "")
        cwd = str(p.get("cwd") or host.workspace.root)
        if propose is None or not command.strip():
            return "decline"
        if self._rel(host, cwd) is None:
            await self._steer(f"(portside) commands run only inside the workspace, not {cwd}")
            return "decline"
        outcome: EditOutcome = await propose(command, str(p.get("reason") or ""), cwd)
        if outcome.status == "rejected":
            await self._steer(f"(portside) The reviewer rejected the command `{command}`: "
                              f"{outcome.message}")
            return "decline"
        if outcome.status != "approved":
            return "decline"
        if outcome.applied_text:
            await self._steer(f"(portside) The reviewer changed your command; run this "
                              f"instead: {outcome.applied_text}")
            return "decline"
        return "accept"
