"""A finished Codex session as a portside session: its rollout file
(``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<thread>.jsonl``), read whole into events
with the original timestamps, in the shapes the live agent (core/codex/live.py) publishes.

- ``session_meta`` (thread id, cwd, originator, CLI version, provider, git) and the first
  ``turn_context`` (approval and sandbox policy, model) → ``session.started`` meta.
- assistant ``message`` items → ``agent.text``; the last one → ``agent.claimed``.
- ``item_completed`` CommandExecution → ``agent.tool_call`` ``exec_command``, a command proposal
  decided by policy (declined ones rejected), its output as ``agent.tool_result``.
- ``item_completed`` FileChange → per file an ``edit.proposed`` with the **whole file** before
  and after, ``edit.decided`` (declined → rejected) and ``edit.applied``. The rollout holds
  only each patch's hunks: the whole texts come from the session's folder as it is now (the
  state after the session), the applied patches undone in reverse order. Where that folder is
  gone or has changed since, the edit keeps its hunks alone (meta ``partial_edits``) and
  verify --session cannot rebuild that file. Only the session's folder is read, and only
  regular files in it (no link followed, no FIFO waited on, at most :data:`MAX_READ`): a path
  the rollout names outside it (``..``, an absolute path, a link leading out, or a folder of
  ``/``) is never opened; its edit keeps its hunks, marked "outside the project, not read"
  (meta ``outside_edits``).
- ``token_usage_record`` → ``agent.usage`` (cached input apart, as live).

Decisions are Codex's run's, never a reviewer's: ``by: "policy"``, reason ``imported: …``, no
intervention. Secrets are masked as in the Claude Code import. Malformed input raises
:class:`~portside.core.agent.imported.TranscriptError` ``file:line: what``; nothing is
returned, so a caller writes nothing.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from portside.core.agent.imported import TranscriptError, seal_imported
from portside.core.codex.live import HUNK, apply_diff
from portside.core.log import events as ev
from portside.core.log.costs import default_prices, token_cost
from portside.core.workspace.risk import risk_marks

IMPORTED = "imported: Codex ran it; no portside reviewer decided"
OUTSIDE = "outside the project, not read"
MAX_READ = 16 * 1024 * 1024  # a source file larger than this keeps its hunks alone


def _ts(value: Any, where: str) -> float:
    if not isinstance(value, str):
        raise TranscriptError(f"{where}: field 'timestamp' missing or not a string")
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise TranscriptError(f"{where}: field 'timestamp' {value[:40]!r} is not ISO 8601") \
            from None


def reverse_diff(diff: str) -> str:
    """The hunks that undo ``diff``."""
    out = []
    for line in diff.splitlines(keepends=True):
        m = HUNK.match(line)
        if m:
            a, b, c, d = m.group(1), m.group(2), m.group(3), m.group(4)
            out.append(f"@@ -{c}{',' + d if d is not None else ''} "
                       f"+{a}{',' + b if b is not None else ''} @@\n")
        elif line[:1] == "+":
            out.append("-" + line[1:])
        elif line[:1] == "-":
            out.append("+" + line[1:])
        else:
            out.append(line)
    return "".join(out)


def _lines(path: Path) -> list[tuple[int, dict[str, Any]]]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TranscriptError(f"{path}:0: cannot read: {exc}") from None
    out = []
    for no, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{no}"
        try:
            obj = json.loads(line)
        except (ValueError, UnicodeDecodeError) as exc:
            raise TranscriptError(f"{where}: not JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise TranscriptError(f"{where}: not a JSON object")
        if not isinstance(obj.get("type"), str):
            raise TranscriptError(f"{where}: field 'type' missing")
        if not isinstance(obj.get("payload"), dict):
            raise TranscriptError(f"{where}: field 'payload' missing or not an object")
        out.append((no, obj))
    if not out:
        raise TranscriptError(f"{path}:1: empty: not a Codex rollout")
    if out[0][1]["type"] != "session_meta":
        raise TranscriptError(f"{path}:{out[0][0]}: expected a session_meta line first "
                              f"(found {out[0][1]['type']!r}): not a Codex rollout")
    return out


def read_codex(path: str | Path, *, session_id: str | None = None,
               target: str = "") -> list[ev.Event]:
    """The whole session as events (seq 1..n), or TranscriptError naming file and line."""
    path = Path(path)
    lines = _lines(path)
    meta_line = lines[0][1]["payload"]
    thread = str(meta_line.get("id") or meta_line.get("session_id") or "")
    if not thread:
        raise TranscriptError(f"{path}:{lines[0][0]}: session_meta has no 'id'")
    cwd = str(meta_line.get("cwd") or "")
    sid = session_id or "codex-" + re.sub(r"[^A-Za-z0-9._:-]", "-", thread)[:120]
    meta: dict[str, Any] = {
        "codex_thread": thread, "imported_from": str(path.resolve()), "import_format":
        "codex-rollout", "timing": "recorded", "cwd": cwd,
        **{k: meta_line.get(k) for k in ("originator", "cli_version", "model_provider", "git")
           if meta_line.get(k) is not None}}
    events: list[ev.Event] = []
    model = ""
    last_text = ""
    changes: list[tuple[ev.EditProposed, str, str, bool]] = []  # (proposed, abs, diff, applied)
    prev = 0.0
    for no, obj in lines:
        where = f"{path}:{no}"
        ts = max(prev, _ts(obj.get("timestamp"), where))
        prev = ts
        p = obj["payload"]
        kind = obj["type"]
        if kind == "turn_context" and "approval_policy" not in meta:
            meta["approval_policy"] = p.get("approval_policy")
            meta["sandbox_policy"] = p.get("sandbox_policy") or p.get("permission_profile")
            model = str(p.get("model") or model)
        elif kind == "response_item" and p.get("type") == "message" \
                and p.get("role") == "assistant":
            text = "".join(str(c.get("text") or "") for c in p.get("content") or []
                           if isinstance(c, dict))
            if text.strip():
                last_text = text
                events.append(ev.AgentText(session_id=sid, ts=ts, text=text))
        elif kind == "token_usage_record":
            u = p.get("usage")
            if not isinstance(u, dict):
                raise TranscriptError(f"{where}: token_usage_record without 'usage'")
            cached = _int(u, "cached_input_tokens")
            i, o = max(0, _int(u, "input_tokens") - cached), _int(u, "output_tokens")
            name = model or "codex"
            events.append(ev.AgentUsage(
                session_id=sid, ts=ts, model=name, input_tokens=i, output_tokens=o,
                cache_read_tokens=cached,
                cost_usd=token_cost(name, i, o, default_prices(), cache_read=cached) or 0.0))
        elif kind == "event_msg" and p.get("type") == "item_completed":
            item = p.get("item")
            if not isinstance(item, dict):
                raise TranscriptError(f"{where}: item_completed without 'item'")
            if item.get("type") == "CommandExecution":
                _command(events, sid, ts, item, cwd)
            elif item.get("type") == "FileChange":
                changes += _file_change(events, sid, ts, item, cwd, where)
    _whole_texts(changes, cwd, meta)
    started = ev.SessionStarted(
        session_id=sid, ts=_ts(lines[0][1].get("timestamp"), f"{path}:{lines[0][0]}"),
        project=cwd, target=target or "unknown", agent=f"codex:{model}" if model else "codex",
        title=f"Codex {thread[:8]} (imported)", mode="imported", meta=meta)
    end = prev
    if last_text:
        events.append(ev.AgentClaimed(session_id=sid, ts=end, summary=last_text))
    events.append(ev.SessionEnded(session_id=sid, ts=end, verdict="undecided",
                                  outcome="imported",
                                  reason=f"imported from {path.name}; not verified"))
    return seal_imported([started, *events], str(path))


def _int(u: dict[str, Any], key: str) -> int:
    v = u.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0


def _rel(cwd: str, path: str) -> str:
    full = os.path.normpath(os.path.join(cwd, path)) if cwd else path
    if cwd and (full == cwd or full.startswith(cwd.rstrip("/") + "/")):
        return os.path.relpath(full, cwd)
    return full


def _command(events: list[ev.Event], sid: str, ts: float, item: dict[str, Any],
             cwd: str) -> None:
    cmd = item.get("command")
    command = " ".join(str(c) for c in cmd) if isinstance(cmd, list) else str(cmd or "")
    call = str(item.get("id") or f"cmd{len(events)}")
    where = _rel(cwd, str(item.get("cwd") or cwd)) or "."
    ran = str(item.get("status") or "completed") not in ("declined", "rejected")
    events.append(ev.AgentToolCall(session_id=sid, ts=ts, call_id=call, name="exec_command",
                                   input={"command": command, "cwd": item.get("cwd")}))
    events.append(ev.CommandProposed(session_id=sid, ts=ts, command_id=f"cmd-{call}",
                                     command=command, cwd=where, description=""))
    events.append(ev.EditDecided(session_id=sid, ts=ts, edit_id=f"cmd-{call}",
                                 decision="approved" if ran else "rejected", by="policy",
                                 reason=IMPORTED if ran else "imported: Codex did not run it"))
    code = item.get("exit_code")
    events.append(ev.AgentToolResult(session_id=sid, ts=ts, call_id=call,
                                     content=str(item.get("aggregated_output") or ""),
                                     is_error=not ran or bool(code)))


def _file_change(events: list[ev.Event], sid: str, ts: float, item: dict[str, Any], cwd: str,
                 where: str) -> list[tuple[ev.EditProposed, str, str, bool]]:
    files = item.get("changes")
    if not isinstance(files, dict):
        raise TranscriptError(f"{where}: FileChange without a 'changes' object")
    call = str(item.get("id") or f"patch{len(events)}")
    applied = item.get("status") == "completed"
    events.append(ev.AgentToolCall(session_id=sid, ts=ts, call_id=call, name="apply_patch",
                                   input={"changes": [{"path": k, "diff": (v or {}).get(
                                       "unified_diff")} for k, v in files.items()]}))
    out = []
    for n, (abs_path, change) in enumerate(files.items()):
        if not isinstance(change, dict):
            raise TranscriptError(f"{where}: change of {abs_path} is not an object")
        diff = str(change.get("unified_diff") or change.get("content") or "")
        kind = str(change.get("type") or "update")
        if kind == "add" and not diff.startswith("@@"):
            before, after = "", diff
        elif kind == "delete":
            before, after = diff, ""
        else:
            before, after = "", diff  # hunks alone until the folder gives the whole texts
        edit_id = f"edit-{call}-{n}"
        rel = _rel(cwd, abs_path)
        proposed = ev.EditProposed(session_id=sid, ts=ts, edit_id=edit_id, path=rel,
                                   before=before, after=after, rationale="apply_patch by Codex")
        events.append(proposed)
        events.append(ev.EditDecided(
            session_id=sid, ts=ts, edit_id=edit_id, decision="approved" if applied
            else "rejected", by="policy", reason=IMPORTED if applied else
            f"imported: Codex did not apply it ({item.get('status')}: "
            f"{str(item.get('stderr') or '')[:300]})"))
        if applied:
            events.append(ev.EditApplied(session_id=sid, ts=ts, edit_id=edit_id, path=rel))
        out.append((proposed, abs_path, diff if kind == "update" else "", applied))
    events.append(ev.AgentToolResult(session_id=sid, ts=ts, call_id=call,
                                     content=f"patch {item.get('status')}",
                                     is_error=not applied))
    return out


def _inside(root: str, full: str) -> str:
    """``full`` with every link on the way resolved, when that is under ``root``; else ""."""
    real = os.path.realpath(full)
    return real if real.startswith(root.rstrip("/") + "/") else ""


def _read_inside(real: str) -> str | None:
    """The text of the regular file at ``real`` (resolved by :func:`_inside`); None when it
    is not one, is larger than :data:`MAX_READ` or is not UTF-8. Opened without following a
    link (one made since it was resolved is refused) and without blocking on a FIFO."""
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_READ:
            return None
        data = os.read(fd, MAX_READ + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > MAX_READ:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _whole_texts(changes: list[tuple[ev.EditProposed, str, str, bool]], cwd: str,
                 meta: dict[str, Any]) -> None:
    """Each update's whole before/after, walking back from the folder as it is now. Nothing
    outside the folder is read: the rollout names the paths, and whoever wrote it chose them."""
    # A folder that is not an absolute directory, or is the filesystem's root, is no project:
    # then every update keeps its hunks.
    root = os.path.realpath(cwd) if os.path.isabs(cwd) and os.path.isdir(cwd) else ""
    if root == "/":
        root = ""
    state: dict[str, str | None] = {}
    partial: list[str] = []
    outside: list[str] = []
    for proposed, abs_path, diff, applied in reversed(changes):
        full = abs_path if os.path.isabs(abs_path) else os.path.join(cwd, abs_path)
        inside = _inside(root, full) if root else ""
        if full not in state:
            state[full] = _read_inside(inside) if inside else None
        now = state[full]
        if not diff:  # add / delete: whole already; the walk back goes through it
            if applied:
                state[full] = proposed.before if proposed.before or now is None else ""
            continue
        if not inside:
            outside.append(proposed.path)
            proposed.rationale += f" (only the diff: {OUTSIDE})"
            state[full] = None
            continue
        now = state[full]
        try:
            if now is None:
                raise ValueError("file not in the folder")
            if applied:
                before = apply_diff(now, reverse_diff(diff))
                proposed.before, proposed.after = before, now
                state[full] = before
            else:  # declined: what it would have made from the text of the time
                proposed.before, proposed.after = now, apply_diff(now, diff)
        except ValueError:
            partial.append(proposed.path)
            proposed.rationale += " (only the diff: the folder no longer holds the text)"
            state[full] = None
            continue
        proposed.risks = risk_marks(proposed.path, proposed.before, proposed.after)
    if partial:
        meta["partial_edits"] = sorted(set(partial))
    if outside:
        meta["outside_edits"] = sorted(set(outside))


__all__ = ["read_codex", "reverse_diff"]
