"""`portside attach`: review a Claude Code session the user runs in their own terminal.

The user's ``claude`` (interactive or ``-p``) keeps its settings and works in the user's own
tree, as they chose. portside serves its hooks on a private channel (a Unix socket in a folder
only this user can enter, both ends authenticated: core/claude_code/attach_channel.py) and
writes them into ``DIR/.claude/settings.local.json`` (core/claude_code/attach_hooks.py,
which keeps and restores what was there). Each hook is answered by
the same gate as ``--agent claude-code`` (core/claude_code/live.py): PreToolUse → edit cards
with real diffs before the file changes, Bash → command cards; PostToolUse → what ran and its
output; Stop → the candidate judged, the stop refused with the evidence while error alarms
are open, the claim checked; SessionStart/SessionEnd → the session's start and end in the log.

The engine still keeps its two copies: the tree as it was before the session (the references
run there, and it is what verify --session and the report diff against) and a workspace copy,
which follows the user's tree (synced at every hook) and where the candidate runs, sandboxed:
the runs never write the user's tree. Claude Code's own Bash commands run in the user's tree,
unwrapped: that is their session. The gate sees paths in the copy; answers are mapped back.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from portside.core.agent.base import AgentHost, AgentStopped
from portside.core.agent.stop_check import MAX_STOP_BLOCKS
from portside.core.claude_code.live import (
    EDIT_TOOLS,
    ClaudeCodeAgent,
    _allow,
    _deny,
)
from portside.core.log import events as ev

PATH_KEYS = ("file_path", "notebook_path", "path")
#: Not synced into the copy: portside's hooks and Claude Code's own state in the user's tree.
NOT_SYNCED = frozenset({".claude"})


def _swap(value: Any, old: str, new: str) -> Any:
    """``value`` with the path prefix ``old`` replaced by ``new`` (strings, in dicts/lists)."""
    if isinstance(value, str):
        if value == old or value.startswith(old + os.sep):
            return new + value[len(old):]
        return value
    if isinstance(value, dict):
        return {k: _swap(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_swap(v, old, new) for v in value]
    return value


def sync_tree(src: Path, dst: Path) -> list[str]:
    """Make ``dst`` hold the project files of ``src`` (what changed is copied, what is gone is
    removed); the paths that changed. Secret-looking files stay out, as in any workspace."""
    from portside.core.workspace.secret_files import is_secret
    from portside.core.workspace.tree_listing import SKIP_DIRS

    def files(root: Path) -> dict[str, Path]:
        out: dict[str, Path] = {}
        for dirpath, dirs, names in os.walk(root):
            rel_dir = os.path.relpath(dirpath, root)
            dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not
                       (rel_dir == "." and d in NOT_SYNCED)]
            for n in names:
                rel = os.path.normpath(os.path.join(rel_dir, n))
                p = Path(dirpath) / n
                if (p.is_file() and not p.is_symlink()) and not is_secret(rel):
                    out[rel] = p
        return out

    have, want = files(dst), files(src)
    changed: list[str] = []
    for rel, p in want.items():
        target = dst / rel
        data = p.read_bytes()
        if rel in have and have[rel].read_bytes() == data:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        shutil.copymode(p, target)
        changed.append(rel)
    for rel in set(have) - set(want):
        have[rel].unlink()
        changed.append(rel)
    return sorted(changed)


class AttachedClaudeCode(ClaudeCodeAgent):
    """An Agent (core/agent/base.py) that is the user's own Claude Code session, reached
    through hooks rather than launched."""

    def __init__(self, tree: Path | str, *, max_stop_blocks: int = MAX_STOP_BLOCKS) -> None:
        super().__init__(None, max_stop_blocks=max_stop_blocks)
        self.tree = Path(os.path.realpath(tree))
        self.label = "claude-code:attached"
        self.url = ""  # the channel folder while serving (not a secret: the key is inside)
        self._ended: asyncio.Event | None = None
        self._cc_sessions: set[str] = set()
        self.on_ready: Callable[[str], None] | None = None  # called with the folder once hooked

    def spec(self) -> dict[str, Any]:
        return {"kind": "claude-code-attached", "tree": str(self.tree),
                "max_stop_blocks": self.max_stop_blocks}

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> AttachedClaudeCode:
        return cls(spec["tree"], max_stop_blocks=int(spec.get("max_stop_blocks")
                                                     or MAX_STOP_BLOCKS))

    def restore(self, events: list[ev.Event], host: AgentHost) -> None:
        """Resumed: the user's Claude Code kept running without portside; attach again."""

    # ---- serving -----------------------------------------------------------------------------

    async def run(self, host: AgentHost) -> None:
        from portside.core.claude_code.attach_channel import HookChannel
        from portside.core.claude_code.attach_hooks import install, uninstall

        loop = asyncio.get_running_loop()
        self._ended = asyncio.Event()

        def refused(why: str) -> None:  # from the channel's thread: into the log
            loop.call_soon_threadsafe(self._publish, host, ev.SessionState(
                session_id=host.session_id, state="hook-refused", detail=why))

        channel = HookChannel(lambda body: asyncio.run_coroutine_threadsafe(
            self._answer(host, body), loop).result(), refused)
        self.url = str(channel.folder)
        try:
            installed = install(self.tree, self.url)
            if installed.recovered:
                self._publish(host, ev.SessionState(session_id=host.session_id,
                                                    state="attach", detail=installed.recovered))
            try:
                sync_tree(self.tree, host.workspace.root)
                self._publish(host, ev.SessionState(
                    session_id=host.session_id, state="attached",
                    detail=f"attached to Claude Code in {self.tree}: it works in your own tree "
                    f"(hooks in {installed.settings}); the runs use portside's copies"))
                if self.on_ready:
                    self.on_ready(self.url)
                while not self._ended.is_set() and not getattr(host, "stopping", ""):
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._ended.wait(), 0.2)
            finally:
                if said := uninstall(installed):
                    self._publish(host, ev.SessionState(session_id=host.session_id,
                                                        state="detached", detail=said))
        finally:
            channel.close()
        if getattr(host, "stopping", ""):
            raise AgentStopped(host.stopping)  # type: ignore[attr-defined]
        if self._done:
            raise AgentStopped("claimed")
        self.last_stop = "session-ended"

    async def _answer(self, host: AgentHost, body: dict[str, Any]) -> dict[str, Any]:
        name = str(body.get("hook_event_name") or "")
        handler: dict[str, Callable[[AgentHost, dict[str, Any]], Awaitable[dict[str, Any]]]] = {
            "PreToolUse": self._on_pre, "PostToolUse": self._on_post, "Stop": self._on_stop,
            "SessionStart": self._on_start, "SessionEnd": self._on_end}
        fn = handler.get(name)
        if fn is None:
            return {}
        return await fn(host, body)

    def _to_copy(self, host: AgentHost, inp: dict[str, Any]) -> dict[str, Any]:
        return _swap(inp, str(self.tree), str(host.workspace.root))  # type: ignore[no-any-return]

    def _to_tree(self, host: AgentHost, out: dict[str, Any]) -> dict[str, Any]:
        return _swap(out, str(host.workspace.root), str(self.tree))  # type: ignore[no-any-return]

    async def _on_start(self, host: AgentHost, body: dict[str, Any]) -> dict[str, Any]:
        sid = str(body.get("session_id") or "")
        self._cc_sessions.add(sid)
        if sid:
            self.session_id = sid
        self._publish(host, ev.SessionState(
            session_id=host.session_id, state="agent-running",
            detail=f"Claude Code session {sid} started ({body.get('source', 'startup')}) in "
            f"{body.get('cwd', self.tree)}"))
        return {}

    async def _on_end(self, host: AgentHost, body: dict[str, Any]) -> dict[str, Any]:
        self._publish(host, ev.SessionState(
            session_id=host.session_id, state="agent-session-ended",
            detail=f"Claude Code session {body.get('session_id', '')} ended "
            f"({body.get('reason', '')})"))
        assert self._ended is not None
        self._ended.set()
        return {}

    async def _on_pre(self, host: AgentHost, body: dict[str, Any]) -> dict[str, Any]:
        if self._done:
            return _deny("portside's review of this session has ended (its verdict is given); "
                         "nothing more runs under it: quit, and attach again for more work")
        sync_tree(self.tree, host.workspace.root)
        inp = self._to_copy(host, body)
        self._publish(host, ev.AgentToolCall(
            session_id=host.session_id, call_id=str(body.get("tool_use_id") or ""),
            name=str(body.get("tool_name") or ""), input=dict(body.get("tool_input") or {})))
        if inp.get("tool_name") == "Bash":
            return self._to_tree(host, await self._gate_user_command(host, inp))
        return self._to_tree(host, await self._pre_tool_use(host, inp))

    async def _gate_user_command(self, host: AgentHost, inp: dict[str, Any]) -> dict[str, Any]:
        """Bash, gated like a launched session's, but run as the user's own Claude Code runs
        it (in their tree, not in portside's sandbox)."""
        try:
            await host.checkpoint()
        except AgentStopped as exc:
            return _deny(f"the review session is ending ({exc}); nothing more runs")
        ti = dict(inp.get("tool_input") or {})
        command = str(ti.get("command") or "")
        propose = getattr(host, "propose_command", None)
        if not command.strip() or propose is None:
            return _deny("empty command" if propose else "this host cannot review commands")
        outcome = await propose(command, str(ti.get("description") or ""),
                                str(inp.get("cwd") or host.workspace.root))
        if outcome.status == "rejected":
            return _deny(f"The reviewer rejected this command: {outcome.message}")
        if outcome.status != "approved":
            return _deny(f"command not run: {outcome.message}")
        if outcome.applied_text:
            return _allow({**ti, "command": outcome.applied_text},
                          f"the reviewer changed the command to: {outcome.applied_text}")
        return _allow(reason="approved by the reviewer")

    async def _on_post(self, host: AgentHost, body: dict[str, Any]) -> dict[str, Any]:
        changed = sync_tree(self.tree, host.workspace.root)
        if changed and body.get("tool_name") not in EDIT_TOOLS:
            # A change no card showed (a command's sed, a script's output): said, in the log.
            self._publish(host, ev.SessionState(
                session_id=host.session_id, state="tree-changed",
                detail=f"{body.get('tool_name')} changed {', '.join(changed[:20])}"
                + (f" and {len(changed) - 20} more" if len(changed) > 20 else "")))
        result = body.get("tool_response")
        content = result if isinstance(result, str) else json.dumps(result, default=str)
        self._publish(host, ev.AgentToolResult(
            session_id=host.session_id, call_id=str(body.get("tool_use_id") or ""),
            content=content[:20000]))
        return self._post_tool_use(host, self._to_copy(host, body))

    async def _on_stop(self, host: AgentHost, body: dict[str, Any]) -> dict[str, Any]:
        sync_tree(self.tree, host.workspace.root)
        last = str(body.get("last_assistant_message") or "")
        if last.strip():
            self._last_text = last
            self._publish(host, ev.AgentText(session_id=host.session_id, text=last))
        return await self._stop(host, body)

