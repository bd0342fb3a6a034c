"""A finished Claude Code session as a portside session: its transcript
(``~/.claude/projects/<dir>/<session>.jsonl``) or a ``claude -p --output-format stream-json
--verbose`` log, read whole into events with the original timestamps.

What becomes what (the shapes the live agent, core/claude_code/live.py, publishes):

- assistant text → ``agent.text``; ``tool_use`` → ``agent.tool_call``; ``tool_result`` →
  ``agent.tool_result``; subagent (sidechain / ``parent_tool_use_id``) traffic labelled
  ``[subagent …]`` and ``_subagent_of`` as live; a transcript's ``<session>/subagents/*.jsonl``
  are merged in by time.
- Edit / MultiEdit / Write / NotebookEdit that ran → ``edit.proposed`` with the whole file before
  and after (the tool result's ``originalFile`` with its ``structuredPatch`` applied; the tool's
  input where the result has no patch), then ``edit.decided`` and ``edit.applied``. One that
  Claude Code refused or failed → ``edit.proposed`` (when its diff can be known) and
  ``edit.decided`` rejected, with the result's text as the reason.
- Bash → a command proposal as live (path ``$ <cwd>``, ``after`` the command, the description
  as rationale), decided like an edit; its output is the ``agent.tool_result``.
- Each API reply's usage → ``agent.usage`` (priced as live); a stream-json ``result`` adds what
  the replies did not count, so the sums equal Claude Code's ``total_cost_usd``.
- The session id, version, model, cwd and git branch → ``session.started`` meta
  (``claude_code_session`` as live); the last main-conversation text → ``agent.claimed``.

**Decisions are the agent run's, not a reviewer's.** A transcript records no permission
decisions, so every imported decision is ``by: "policy"`` with the reason ``imported: …``, and no
``intervention`` event is written: an imported session adds nothing to the ledger's
interventions or human minutes.

**Time.** Transcript lines carry ``timestamp``; a stream-json log has no clock per line, so its
lines are spread evenly over the ``result``'s ``duration_ms``, ending at the log's modification
time (meta ``timing: "estimated"``). Claude Code appends its conversation in time order, so a
user or assistant line dated earlier than an earlier one (a spliced or hand-edited file) is
refused as ``file:line: timestamp … is earlier than line N (…)``: the replay's timing would be
made up. Other lines (attachments, queue operations) are left out of that check and of the
clock (placed between the conversation lines around them): Claude Code writes them out of order
(an attachment a few ms before the prompt it follows; a fork's queue operations, dated at the
fork, ahead of the history it copies), and they become no event.

**Repeats.** A line whose ``uuid`` an earlier line of the same file had (a file concatenated
with itself; Claude Code re-writing history into the file after a compaction, or with
``--input-format stream-json``) is skipped, so no event is doubled, and said in the session's
``import_notes`` as ``file:line: duplicate of line N (uuid …)`` with ``duplicate_lines`` the
count. A resumed or forked session's new file repeats the earlier one's uuids: that is another
file, imported on its own.

**Secrets** (this environment's secret values, secret assignments in the session's commands,
and token-shaped strings such as ``sk-ant-…`` or ``ghp_…`` from tool output) are masked in every
field before anything is returned (core/safety/secrets.py).

Malformed input raises :class:`TranscriptError` ``file:line: what``; nothing is returned, so a
caller writes nothing. Pure parsing: no store, no Textual.
"""

from __future__ import annotations

import datetime as dt
import heapq
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from portside.core.agent.imported import TranscriptError, seal_imported
from portside.core.claude_code.live import EDIT_TOOLS, result_text
from portside.core.log import events as ev
from portside.core.log.costs import default_prices, token_cost
from portside.core.workspace.risk import risk_marks

FORMATS = ("transcript", "stream-json")
IMPORTED = "imported: Claude Code ran it; no portside reviewer decided"


@dataclass
class _Line:
    no: int
    obj: dict[str, Any]
    ts: float | None
    where: str = ""


@dataclass
class _Call:
    """A tool_use waiting for its result."""

    name: str
    input: dict[str, Any]
    line: int
    label: str
    cwd: str = ""


@dataclass
class _State:
    where: str
    session_id: str
    fmt: str
    cwd: str = ""
    events: list[ev.Event] = field(default_factory=list)
    calls: dict[str, _Call] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)  # absolute path → text, as last seen
    seen_usage: set[str] = field(default_factory=set)
    totals: dict[str, int] = field(default_factory=lambda: {"input": 0, "output": 0,
                                                            "cache_read": 0, "cache_write": 0})
    cost: float = 0.0
    model: str = ""
    last_text: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    partial: list[str] = field(default_factory=list)
    created: list[str] = field(default_factory=list)  # files the session made (Write "create")
    outside: list[str] = field(default_factory=list)
    ts: float = 0.0

    def fail(self, ln: _Line, what: str) -> TranscriptError:
        return TranscriptError(f"{ln.where or self.where}:{ln.no}: {what}")

    def add(self, event: ev.Event) -> None:
        event.ts = self.ts
        self.events.append(event)


def _iso(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        stamp = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=dt.UTC)
    ts = stamp.timestamp()
    return ts if 0 <= ts <= ev.MAX_TS else None


def _read_lines(path: Path, where: str) -> tuple[list[_Line], str]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TranscriptError(f"{where}: cannot read: {exc.strerror}") from None
    lines: list[_Line] = []
    fmt = ""
    for no, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise TranscriptError(f"{where}:{no}: not JSON: {exc}") from None
        except RecursionError:
            raise TranscriptError(f"{where}:{no}: nested too deep") from None
        if not isinstance(obj, dict):
            raise TranscriptError(f"{where}:{no}: not a JSON object")
        if not isinstance(obj.get("type"), str):
            raise TranscriptError(f"{where}:{no}: field type: missing")
        # Transcripts say sessionId (camelCase), stream-json session_id.
        line_fmt = ("transcript" if "sessionId" in obj else
                    "stream-json" if "session_id" in obj else "")
        if line_fmt and fmt and line_fmt != fmt:
            raise TranscriptError(f"{where}:{no}: a {line_fmt} line in a {fmt} file")
        fmt = fmt or line_fmt
        ts = None
        if "timestamp" in obj:
            ts = _iso(obj["timestamp"])
            if ts is None:
                raise TranscriptError(f"{where}:{no}: field timestamp: {ascii(obj['timestamp'])[:60]}"
                                      " is not an ISO 8601 time")
        lines.append(_Line(no, obj, ts, where))
    if not lines:
        raise TranscriptError(f"{where}:1: empty file")
    if not fmt:
        raise TranscriptError(f"{where}:{lines[0].no}: not a Claude Code transcript or "
                              "stream-json log (no line has sessionId or session_id)")
    return lines, fmt


NOTES_SHOWN = 10  # duplicate lines named one by one in import_notes; the rest are counted


def _without_repeats(lines: list[_Line]) -> tuple[list[_Line], list[str]]:
    """The lines less those whose ``uuid`` an earlier line had, and a note for each skipped.
    The first copy is kept: later ones are history written again, and when their payload
    differs the note says so (what was dropped is then named, not silent)."""
    first: dict[str, _Line] = {}
    kept: list[_Line] = []
    notes: list[str] = []
    for ln in lines:
        uid = ln.obj.get("uuid")
        if not isinstance(uid, str) or not uid:
            kept.append(ln)
            continue
        was = first.setdefault(uid, ln)
        if was is ln:
            kept.append(ln)
            continue
        differs = [k for k in ("type", "message", "toolUseResult", "tool_use_result")
                   if ln.obj.get(k) != was.obj.get(k)]
        notes.append(f"{ln.where}:{ln.no}: duplicate of line {was.no} (uuid {ascii(uid)[1:-1][:60]})"
                     + (f"; its {', '.join(differs)} differs, line {was.no}'s is kept"
                        if differs else ""))
    return kept, notes


def _check_order(lines: list[_Line]) -> None:
    """Refuse a user or assistant line dated earlier than an earlier one (see Time)."""
    latest: _Line | None = None
    for ln in lines:
        if ln.ts is None or ln.obj.get("type") not in ("user", "assistant"):
            continue
        if latest is not None and latest.ts is not None and ln.ts < latest.ts:
            raise TranscriptError(
                f"{ln.where}:{ln.no}: timestamp {_shown_ts(ln)} is earlier than line "
                f"{latest.no} ({_shown_ts(latest)}): Claude Code appends its transcript in time "
                "order, so this file was spliced or edited")
        latest = ln


def _shown_ts(ln: _Line) -> str:
    return ascii(ln.obj.get("timestamp"))[1:-1][:40]


def _checked(lines: list[_Line]) -> tuple[list[_Line], list[str]]:
    """One file's lines without repeats, refused if out of time order."""
    lines, notes = _without_repeats(lines)
    _check_order(lines)
    return lines, notes


def _with_subagents(path: Path, lines: list[_Line], notes: list[str]
                    ) -> tuple[list[_Line], list[str]]:
    """Newer Claude Code writes each subagent's (Task's) conversation beside the transcript, in
    ``<session>/subagents/*.jsonl``: merged in by time, each line still named by its own file
    (its repeats noted in ``notes``)."""
    folder = path.with_suffix("") / "subagents"
    if not folder.is_dir():
        return lines, []
    runs = [lines]
    names = []
    for sub in sorted(folder.glob("*.jsonl")):
        sub_lines, sub_fmt = _read_lines(sub, str(sub))
        if sub_fmt != "transcript":
            raise TranscriptError(f"{sub}:1: a subagent file that is not a transcript")
        sub_lines, sub_notes = _checked(sub_lines)
        notes.extend(sub_notes)
        _place_in_time(sub_lines, sub)
        for ln in sub_lines:
            ln.obj.setdefault("isSidechain", True)
            ln.obj.setdefault("agentId", sub.stem.removeprefix("agent-"))
        runs.append(sub_lines)
        names.append(sub.name)
    return list(heapq.merge(*runs, key=lambda ln: ln.ts or 0.0)), names


def _place_in_time(lines: list[_Line], path: Path) -> str:
    """Give every line a time: "recorded" (each conversation line has one), "partly estimated"
    (a line without one between two with: interpolated), "estimated" (none has: an older
    stream-json log, spread over its ``duration_ms`` up to the log's modification time)."""
    _conversation_clock(lines)
    known = [i for i, ln in enumerate(lines) if ln.ts is not None]
    if not known:
        end = path.stat().st_mtime
        duration = 0.0
        for ln in lines:
            if ln.obj.get("type") == "result" and isinstance(ln.obj.get("duration_ms"), int | float):
                duration = max(0.0, float(ln.obj["duration_ms"]) / 1000.0)
        start = max(0.0, end - duration)
        step = (end - start) / max(1, len(lines) - 1)
        for i, ln in enumerate(lines):
            ln.ts = start + i * step
        return "estimated"
    missing = any(ln.ts is None and ln.obj.get("type") in ("user", "assistant") for ln in lines)
    prev = known[0]
    for nxt in [*known[1:], None]:
        lo = lines[prev].ts
        hi = lines[nxt].ts if nxt is not None else lo
        assert lo is not None and hi is not None
        stop = nxt if nxt is not None else len(lines)
        for i in range(prev + 1, stop):
            lines[i].ts = lo + (hi - lo) * (i - prev) / (stop - prev) if nxt is not None else lo
        if nxt is not None:
            prev = nxt
    for i in range(known[0]):
        lines[i].ts = lines[known[0]].ts
    return "partly estimated" if missing else "recorded"


def _conversation_clock(lines: list[_Line]) -> None:
    """Where user or assistant lines carry times, they alone are the clock: the other lines
    are placed between them. A forked session's file starts with queue operations dated at the
    fork, then the earlier history with its own times; by file order those would squeeze that
    history into one instant."""
    if any(ln.ts is not None and ln.obj.get("type") in ("user", "assistant") for ln in lines):
        for ln in lines:
            if ln.obj.get("type") not in ("user", "assistant"):
                ln.ts = None


def _require(st: _State, ln: _Line, obj: Any, name: str, kind: type | tuple[type, ...],
             where: str = "") -> Any:
    if not isinstance(obj, dict) or name not in obj:
        raise st.fail(ln, f"field {where}{name}: missing")
    value = obj[name]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        want = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise st.fail(ln, f"field {where}{name}: expected {want}, got {type(value).__name__}")
    return value


def read_claude_code(path: str | Path, *, session_id: str | None = None, target: str = "",
                     project: str | None = None) -> list[ev.Event]:
    """The whole session as events (seq 1..n), or TranscriptError naming file and line."""
    path = Path(path)
    where = str(path)
    lines, fmt = _read_lines(path, where)
    lines, repeats = _checked(lines)
    timing = _place_in_time(lines, path)
    subagents: list[str] = []
    if fmt == "transcript":
        lines, subagents = _with_subagents(path, lines, repeats)
    claude_id = ""
    for ln in lines:
        claude_id = str(ln.obj.get("sessionId") or ln.obj.get("session_id") or "")
        if claude_id:
            break
    # The store checks ids (store/jsonl.py session_id_problem); Claude Code's are uuids.
    sid = session_id or "cc-" + re.sub(r"[^A-Za-z0-9._:-]", "-", claude_id)[:125]
    st = _State(where, sid, fmt)
    st.meta = {"claude_code_session": claude_id, "imported_from": str(path.resolve()),
               "import_format": fmt, "timing": timing}
    if subagents:
        st.meta["subagent_files"] = subagents
    if repeats:
        st.meta["duplicate_lines"] = len(repeats)
        st.meta["import_notes"] = _repeat_notes(repeats)
    first_ts = float(lines[0].ts or 0.0)
    st.ts = first_ts
    for ln in lines:
        st.ts = max(st.ts, float(ln.ts or 0.0))
        _line(st, ln)
    if st.calls:
        st.meta["unanswered_tool_calls"] = sorted(st.calls)
    if st.partial:
        st.meta["partial_edits"] = sorted(set(st.partial))
    if st.created:
        st.meta["created_files"] = sorted(set(st.created))
    if st.outside:
        st.meta["edits_outside_cwd"] = sorted(set(st.outside))
    cwd = project or st.cwd
    started = ev.SessionStarted(
        session_id=sid, ts=first_ts, project=cwd, target=target or "unknown",
        agent=f"claude-code:{st.model}" if st.model else "claude-code",
        title=f"Claude Code {claude_id[:8]} (imported)", mode="imported",
        meta={**st.meta, "cwd": st.cwd})
    if st.last_text:
        st.add(ev.AgentClaimed(session_id=sid, summary=st.last_text))
    st.add(ev.SessionEnded(session_id=sid, verdict="undecided", outcome="imported",
                           reason=f"imported from {path.name}; not verified"))
    return seal_imported([started, *st.events], where)


def _repeat_notes(repeats: list[str]) -> list[str]:
    """What import says of skipped repeats: a count, then the first few by file and line."""
    head = (f"{len(repeats)} duplicate line{'s' * (len(repeats) != 1)} skipped (the same uuid as "
            "an earlier line of the file; its events are not doubled)")
    more = len(repeats) - NOTES_SHOWN
    return [head, *repeats[:NOTES_SHOWN], *([f"... and {more} more"] if more > 0 else [])]


# --- one line ---------------------------------------------------------------------------------


def _line(st: _State, ln: _Line) -> None:
    obj = ln.obj
    kind = obj["type"]
    if obj.get("cwd") and isinstance(obj["cwd"], str) and not st.cwd:
        st.cwd = obj["cwd"]
    for key, name in (("version", "claude_code_version"), ("gitBranch", "git_branch")):
        if isinstance(obj.get(key), str) and obj[key] and name not in st.meta:
            st.meta[name] = obj[key]
    if kind == "system":
        if obj.get("subtype") == "init":
            st.model = str(obj.get("model") or st.model)
            st.meta.setdefault("claude_code_version", obj.get("claude_code_version") or "")
            st.add(ev.SessionState(
                session_id=st.session_id, state="agent-running",
                detail=f"Claude Code session {obj.get('session_id')}, model {obj.get('model')}, "
                f"cwd {obj.get('cwd')} (imported)"))
        return
    if kind == "result":
        _result(st, ln)
        return
    if kind == "cost-state":
        _cost_state(st, ln)
        return
    if kind not in ("user", "assistant"):
        return  # summaries, file snapshots, queue operations, stream events: not the session
    if st.fmt == "transcript" and ln.ts is None:
        raise st.fail(ln, "field timestamp: missing")
    message = _require(st, ln, obj, "message", dict)
    content = _require(st, ln, message, "content", (str, list), "message.")
    sub = obj.get("parent_tool_use_id") or (
        (obj.get("agentId") or "sidechain") if obj.get("isSidechain") else "")
    label = f"[subagent {sub}] " if sub else ""
    if kind == "assistant":
        _assistant(st, ln, message, content, str(sub), label)
    elif not obj.get("isMeta"):
        _user(st, ln, content, label)


def _assistant(st: _State, ln: _Line, message: dict[str, Any], content: Any, sub: str,
               label: str) -> None:
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    for i, block in enumerate(blocks):
        at = f"message.content[{i}]."
        if not isinstance(block, dict):
            raise st.fail(ln, f"field message.content[{i}]: not an object")
        btype = _require(st, ln, block, "type", str, at)
        if btype == "text":
            text = _require(st, ln, block, "text", str, at)
            if text.strip():
                if not sub:
                    st.last_text = text
                st.add(ev.AgentText(session_id=st.session_id, text=label + text))
        elif btype == "tool_use":
            call_id = _require(st, ln, block, "id", str, at)
            name = _require(st, ln, block, "name", str, at)
            data = dict(_require(st, ln, block, "input", dict, at))
            if sub:
                data["_subagent_of"] = sub
            st.add(ev.AgentToolCall(session_id=st.session_id, call_id=call_id, name=name,
                                    input=data))
            st.calls[call_id] = _Call(name, dict(block["input"]), ln.no, label,
                                      str(ln.obj.get("cwd") or ""))
    _usage(st, ln, message)


def _user(st: _State, ln: _Line, content: Any, label: str) -> None:
    if isinstance(content, str):
        if content.strip():
            if "task" not in st.meta:
                st.meta["task"] = content
            st.add(ev.SessionState(session_id=st.session_id, state="user-message",
                                   detail=label + content))
        return
    structured = ln.obj.get("toolUseResult", ln.obj.get("tool_use_result"))
    for i, block in enumerate(content):
        at = f"message.content[{i}]."
        if not isinstance(block, dict):
            raise st.fail(ln, f"field message.content[{i}]: not an object")
        btype = _require(st, ln, block, "type", str, at)
        if btype == "text" and isinstance(block.get("text"), str) and block["text"].strip():
            st.add(ev.SessionState(session_id=st.session_id, state="user-message",
                                   detail=label + block["text"]))
        if btype != "tool_result":
            continue
        call_id = _require(st, ln, block, "tool_use_id", str, at)
        text = result_text(block.get("content"))
        is_error = bool(block.get("is_error"))
        call = st.calls.pop(call_id, None)
        if call is not None and (call.name in EDIT_TOOLS or call.name == "Bash"):
            _decided(st, ln, call, call_id, structured, text, is_error,
                     _recorded_decision(ln.obj.get("permissionDecision")))
        elif call is not None and call.name == "Read" and isinstance(structured, dict):
            _note_read(st, structured)
        st.add(ev.AgentToolResult(session_id=st.session_id, call_id=call_id, content=text,
                                  is_error=is_error))


# --- edits and commands ---------------------------------------------------------------------


def _note_read(st: _State, result: dict[str, Any]) -> None:
    """A whole-file Read tells the file's text (an edit without ``originalFile`` needs it)."""
    f = result.get("file")
    if not isinstance(f, dict) or not isinstance(f.get("content"), str):
        return
    if f.get("startLine", 1) == 1 and f.get("numLines") == f.get("totalLines"):
        st.files[str(f.get("filePath") or "")] = f["content"]


def _rel(st: _State, path: str) -> str | None:
    """``path`` relative to the session's cwd, or None when it lies outside."""
    root = os.path.normpath(st.cwd or "/")
    full = os.path.normpath(os.path.join(root, path))
    if full != root and not full.startswith(root.rstrip(os.sep) + os.sep):
        return None
    return os.path.relpath(full, root)


def _apply_patch(original: str, hunks: Any) -> str | None:
    """``original`` with a ``structuredPatch`` applied, or None when it does not apply. Each
    hunk is matched by its text, at its ``oldStart`` or the next place it fits (the line
    numbers of a patch made against the same text are exact; this only adds robustness)."""
    if not isinstance(hunks, list):
        return None
    eol = "\r\n" if "\r\n" in original else "\n"
    ends = original.endswith("\n")
    lines = original.split(eol)
    if ends or not original:
        lines.pop()
    out: list[str] = []
    pos = 0
    for h in hunks:
        if not isinstance(h, dict) or not isinstance(h.get("lines"), list):
            return None
        body = [str(x) for x in h["lines"] if not str(x).startswith("\\")]
        old = [x[1:] for x in body if x[:1] in (" ", "-")]
        new = [x[1:] for x in body if x[:1] in (" ", "+")]
        start = h.get("oldStart")
        # 1-based; a hunk with no old lines (an insertion, no context) inserts before it.
        start = start - 1 if isinstance(start, int) and not isinstance(start, bool) and start > 0 \
            else pos
        found = next((s for s in [max(pos, start), *range(pos, len(lines) + 1)]
                      if lines[s:s + len(old)] == old and s + len(old) <= len(lines)), None)
        if found is None:
            return None
        out.extend(lines[pos:found])
        out.extend(new)
        pos = found + len(old)
    out.extend(lines[pos:])
    return eol.join(out) + (eol if out and (ends or not original) else "")


def _from_input(before: str, name: str, ti: dict[str, Any]) -> str | None:
    """The tool's input applied to ``before`` (as Claude Code applies it), or None."""
    if name == "Write":
        return str(ti.get("content", ""))
    if name not in ("Edit", "MultiEdit"):
        return None
    text = before
    for e in (ti.get("edits") or []) if name == "MultiEdit" else [ti]:
        if not isinstance(e, dict):
            return None
        old, new = str(e.get("old_string", "")), str(e.get("new_string", ""))
        if not old:
            if text:
                return None
            text = new
        elif old not in text:
            return None
        else:
            text = text.replace(old, new) if e.get("replace_all") else text.replace(old, new, 1)
    return text


def _edit_texts(st: _State, ln: _Line, call: _Call, result: Any, ok: bool
                ) -> tuple[str, str, bool] | None:
    """(before, after, whole) of an edit: the result's original text and patch first, then
    what the session showed of the file and the tool's input. ``whole`` False: only the
    changed strings are known (the file's text is not in the transcript)."""
    ti = call.input
    path = str(ti.get("file_path") or ti.get("notebook_path") or "")
    r = result if isinstance(result, dict) and ok else {}
    original = r.get("originalFile", r.get("originalFileContents"))
    if call.name == "Write" and r.get("type") == "create":
        original = ""
    before = original if isinstance(original, str) else st.files.get(path)
    if before is None and call.name == "Write" and ok and r.get("type") == "create":
        before = ""
    if before is not None:
        after = None
        if ok and call.name == "Write" and isinstance(r.get("content"), str):
            after = r["content"]
        elif ok and before and isinstance(r.get("structuredPatch"), list) and r["structuredPatch"]:
            after = _apply_patch(before, r["structuredPatch"])
            if after is None:
                raise st.fail(ln, f"field toolUseResult.structuredPatch: does not apply to "
                              f"the text of {path} before the {call.name}")
        if after is None:
            after = _from_input(before, call.name, ti)
        if after is not None:
            return before, after, True
    if call.name == "Edit" and isinstance(ti.get("old_string"), str):
        return str(ti["old_string"]), str(ti.get("new_string", "")), False
    if call.name == "Write" and isinstance(ti.get("content"), str):
        return "", ti["content"], False
    return None


def _recorded_decision(value: Any) -> str:
    """Newer transcripts say how Claude Code allowed a tool (``permissionDecision``: decision,
    source, rule): kept in the reason, still not a portside intervention (no attention time)."""
    if not isinstance(value, dict):
        return ""
    parts = [str(value[k]) for k in ("source", "reasonType", "ruleSource") if value.get(k)]
    return f"{value.get('decision', '?')}" + (f" ({', '.join(parts)})" if parts else "")


def _decided(st: _State, ln: _Line, call: _Call, call_id: str, result: Any, text: str,
             is_error: bool, recorded: str = "") -> None:
    sid = st.session_id
    edit_id = f"edit-{call_id}"
    if call.name == "Bash":
        command = str(call.input.get("command") or "")
        where = _rel(st, call.cwd or st.cwd) or call.cwd
        st.add(ev.CommandProposed(session_id=sid, command_id=f"cmd-{call_id}", command=command,
                                  cwd=where or ".",
                                  description=call.label + str(call.input.get("description")
                                                               or "")))
        _decision(st, f"cmd-{call_id}", is_error, text, recorded=recorded)
        return
    path = str(call.input.get("file_path") or call.input.get("notebook_path") or "")
    texts = _edit_texts(st, ln, call, result, not is_error)
    if texts is None:
        return  # nothing to show as a diff (e.g. a NotebookEdit without the notebook's text)
    before, after, whole = texts
    rel = _rel(st, path) if path else None
    if rel is None:
        st.outside.append(path)
    if not whole and not is_error:
        st.partial.append(rel or path)
    shown = rel or path
    rationale = call.label + (f"{call.name} by Claude Code" if whole else
                              f"{call.name} by Claude Code (only the changed text: the file's "
                              "whole text is not in the transcript)")
    st.add(ev.EditProposed(session_id=sid, edit_id=edit_id, path=shown, before=before,
                           after=after, rationale=rationale,
                           risks=risk_marks(shown, before, after) if whole else []))
    _decision(st, edit_id, is_error, text, shown, recorded)
    if not is_error and whole:
        if rel is not None and isinstance(result, dict) and result.get("type") == "create":
            st.created.append(rel)
        st.files[path] = after


def _decision(st: _State, edit_id: str, is_error: bool, text: str, path: str = "",
              recorded: str = "") -> None:
    sid = st.session_id
    said = f" (Claude Code's permission: {recorded})" if recorded else ""
    if is_error:
        st.add(ev.EditDecided(session_id=sid, edit_id=edit_id, decision="rejected", by="policy",
                              reason=f"imported: Claude Code did not run it{said}: {text[:500]}"))
        return
    st.add(ev.EditDecided(session_id=sid, edit_id=edit_id, decision="approved", by="policy",
                          reason=IMPORTED + said))
    if path:
        st.add(ev.EditApplied(session_id=sid, edit_id=edit_id, path=path))


# --- usage ----------------------------------------------------------------------------------


def _int(u: dict[str, Any], key: str) -> int:
    v = u.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0


def _usage(st: _State, ln: _Line, message: dict[str, Any]) -> None:
    """One ``agent.usage`` per API reply: Claude Code writes a reply's blocks as several lines
    with the same message id and usage."""
    u = message.get("usage")
    if not isinstance(u, dict) or not u:
        return
    mid = str(message.get("id") or "")
    if mid and mid in st.seen_usage:
        return
    st.seen_usage.add(mid)
    model = str(message.get("model") or st.model or "claude-code")
    if model != "<synthetic>":
        st.model = model
    i, o = _int(u, "input_tokens"), _int(u, "output_tokens")
    cr, cw = _int(u, "cache_read_input_tokens"), _int(u, "cache_creation_input_tokens")
    cost = token_cost(model, i, o, default_prices(), cache_read=cr, cache_write=cw) or 0.0
    for k, v in (("input", i), ("output", o), ("cache_read", cr), ("cache_write", cw)):
        st.totals[k] += v
    st.cost += cost
    st.add(ev.AgentUsage(session_id=st.session_id, model=model, input_tokens=i, output_tokens=o,
                         cache_read_tokens=cr, cache_write_tokens=cw, cost_usd=cost))


def _cost_state(st: _State, ln: _Line) -> None:
    """A transcript's ``cost-state`` line: Claude Code's running totals (``totalCostUSD``,
    ``modelUsage``), used as the stream-json ``result``'s are."""
    models = ln.obj.get("modelUsage")
    u: dict[str, int] = {}
    for m in models.values() if isinstance(models, dict) else []:
        if isinstance(m, dict):
            for ours, theirs in (("input_tokens", "inputTokens"), ("output_tokens", "outputTokens"),
                                 ("cache_read_input_tokens", "cacheReadInputTokens"),
                                 ("cache_creation_input_tokens", "cacheCreationInputTokens")):
                u[ours] = u.get(ours, 0) + _int(m, theirs)
    _rest_usage(st, u, ln.obj.get("totalCostUSD"))


def _rest_usage(st: _State, u: dict[str, Any], total: Any) -> float:
    """What the per-reply usage did not count of Claude Code's totals, as one more
    ``agent.usage``, so the session's sums equal Claude Code's (as live). Returns the total $."""
    t = st.totals
    rest = {"input": max(0, _int(u, "input_tokens") - t["input"]),
            "output": max(0, _int(u, "output_tokens") - t["output"]),
            "cache_read": max(0, _int(u, "cache_read_input_tokens") - t["cache_read"]),
            "cache_write": max(0, _int(u, "cache_creation_input_tokens") - t["cache_write"])}
    total = float(total) if isinstance(total, int | float) and not isinstance(total, bool) else 0.0
    cost = max(0.0, total - st.cost)
    if any(rest.values()) or cost > 0:
        st.add(ev.AgentUsage(session_id=st.session_id, model=st.model or "claude-code",
                             input_tokens=rest["input"], output_tokens=rest["output"],
                             cache_read_tokens=rest["cache_read"],
                             cache_write_tokens=rest["cache_write"], cost_usd=cost))
        for k, v in rest.items():
            t[k] += v
        st.cost += cost
    return total


def _result(st: _State, ln: _Line) -> None:
    """stream-json's ``result``: the session's totals, and its final text."""
    obj = ln.obj
    u: dict[str, Any] = obj["usage"] if isinstance(obj.get("usage"), dict) else {}
    total = _rest_usage(st, u, obj.get("total_cost_usd"))
    if isinstance(obj.get("result"), str) and obj["result"].strip():
        st.last_text = obj["result"]
    st.meta["result"] = {k: obj.get(k) for k in ("subtype", "duration_ms", "num_turns",
                                                  "total_cost_usd", "is_error") if k in obj}
    st.add(ev.SessionState(
        session_id=st.session_id, state="agent-result",
        detail=f"Claude Code {obj.get('subtype')}: {obj.get('num_turns')} turns, "
        f"{float(obj.get('duration_ms') or 0) / 1000:.1f} s, total_cost_usd {total:.4f}"))


__all__ = ["FORMATS", "read_claude_code"]
