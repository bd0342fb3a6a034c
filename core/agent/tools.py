"""The agent's tools: their schemas, input checks, and how each one runs against the host.

Both agents go through :func:`execute`, so a scripted replay publishes the same tool calls and
results as the Claude agent does. Nothing here imports the anthropic SDK.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from portside.core.workspace.names import WorkspaceError

from .base import AgentHost, AgentStopped, EditOutcome

#: Longest tool result handed to the model (and published); longer text is cut with a note.
MAX_RESULT_CHARS = 60_000


@dataclass
class ToolResult:
    content: str
    is_error: bool = False
    claimed: bool = False  # the agent called ``finish``: its run ends after this result
    rejected: bool = False  # the reviewer rejected the proposed edit


class ToolInputError(ValueError):
    """The model's input for a tool does not fit its schema; the message says how."""


# name -> (required fields, optional fields), each field -> "string" | "integer"
_FIELDS: dict[str, tuple[dict[str, str], dict[str, str]]] = {
    "list_files": ({}, {"pattern": "string", "limit": "integer"}),
    "read_file": ({"path": "string"}, {"start_line": "integer", "end_line": "integer"}),
    "grep": ({"pattern": "string"}, {"glob": "string", "limit": "integer"}),
    "propose_edit": (
        {"path": "string", "old": "string", "new": "string", "rationale": "string"},
        {},
    ),
    "write_file": ({"path": "string", "content": "string", "rationale": "string"}, {}),
    "run_reference": ({}, {}),
    "run_candidate": ({}, {}),
    "read_run_log": ({}, {"run": "string", "tail": "integer", "grep": "string"}),
    "finish": ({"summary": "string"}, {}),
}

_DESCRIPTIONS: dict[str, str] = {
    "list_files": "List files in the project workspace. `pattern` is a glob ('**' crosses "
    "directories; a pattern without '/' matches file names at any depth; a directory name "
    "lists everything under it). Without a pattern, lists every file.",
    "read_file": "Read a text file of the workspace, with line numbers (`  12\\t...`; the "
    "numbers and the tab are not part of the file). Give start_line/end_line (1-based, "
    "inclusive) to read part of a large file.",
    "grep": "Search the workspace's text files for a Python regular expression; returns "
    "`path:line: text` for each matching line. `glob` limits the files searched.",
    "propose_edit": "Propose replacing one exact occurrence of `old` with `new` in `path`. "
    "`old` must match the file exactly once, including whitespace (copy it from read_file "
    "without the line numbers). A human reviewer approves, edits or rejects it; the result "
    "says which, with the reviewer's reason on rejection. `rationale` tells the reviewer why "
    "(what it changes for TPUs, and why numerics are preserved).",
    "write_file": "Propose setting the whole content of `path` (creating it if needed). Prefer "
    "propose_edit for changes to existing files: reviewers judge small diffs faster. Reviewed "
    "like propose_edit.",
    "run_reference": "Run the original (GPU-written) project again, unchanged, as an extra "
    "independent reference. Returns portside's summary. Rarely needed: reference runs are made "
    "before you start.",
    "run_candidate": "Run the candidate command on the workspace as it is now, on the target "
    "hardware, with portside's probe. Returns the outcome (passed / failed-error / "
    "failed-timeout / failed-silent), timing (compile time apart from steady state) and the "
    "alarms raised by portside's checks against the reference runs.",
    "read_run_log": "Read the output of a run: `run` is 'last' (default), 'reference', "
    "'candidate' or a run id; `tail` is the number of last lines (default 50); `grep` keeps "
    "only lines matching a regular expression.",
    "finish": "Claim the port is done and verified. `summary` lists what you changed and the "
    "evidence (the passing candidate run, its alarms). Only call it after run_candidate passed "
    "with no open error alarms; portside checks the claim against its own alarms.",
}

_PROPERTY_DOCS: dict[str, str] = {
    "pattern": "",
    "limit": "maximum number of results",
    "path": "path relative to the project root, e.g. 'train.py'",
    "start_line": "first line to read (1-based)",
    "end_line": "last line to read (inclusive)",
    "glob": "only search files matching this glob",
    "old": "the exact text to replace (must occur exactly once)",
    "new": "the replacement text",
    "rationale": "why: shown to the reviewer with the diff",
    "content": "the file's complete new content",
    "run": "'last', 'reference', 'candidate' or a run id",
    "tail": "number of last lines",
    "grep": "regular expression the lines must match",
    "summary": "what changed and the evidence that the port is correct",
}

TOOL_NAMES: tuple[str, ...] = tuple(_FIELDS)


def tool_specs() -> list[dict[str, Any]]:
    """Anthropic Messages API tool definitions."""
    specs = []
    for name, (required, optional) in _FIELDS.items():
        props: dict[str, Any] = {}
        for field, typ in {**required, **optional}.items():
            prop: dict[str, Any] = {"type": typ}
            doc = _PROPERTY_DOCS.get(field)
            if field == "pattern":
                doc = "regular expression" if name == "grep" else "glob pattern"
            if doc:
                prop["description"] = doc
            props[field] = prop
        specs.append(
            {
                "name": name,
                "description": _DESCRIPTIONS[name],
                "input_schema": {"type": "object", "properties": props, "required": list(required)},
            }
        )
    return specs


def validate(name: str, raw: object) -> dict[str, Any]:
    """The input as a checked dict; ToolInputError with a message the model can act on."""
    if name not in _FIELDS:
        raise ToolInputError(f"unknown tool {name!r}; the tools are: {', '.join(TOOL_NAMES)}")
    required, optional = _FIELDS[name]
    allowed = {**required, **optional}
    usage = f"{name} takes: {', '.join(allowed) or 'no fields'}"
    if not isinstance(raw, dict):
        raise ToolInputError(f"{name}: the input must be a JSON object, got {type(raw).__name__}")
    unknown = sorted(k for k in raw if k not in allowed)
    if unknown:
        raise ToolInputError(f"{name}: unknown field(s) {', '.join(unknown)}; {usage}")
    missing = [k for k in required if k not in raw]
    if missing:
        raise ToolInputError(f"{name}: missing required field(s) {', '.join(missing)}; {usage}")
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if value is None and key in optional:
            continue  # an explicit null means "not given"
        want = allowed[key]
        if want == "string" and not isinstance(value, str):
            raise ToolInputError(f"{name}: field {key} must be a string, got {_json_type(value)}")
        if want == "integer" and (isinstance(value, bool) or not isinstance(value, int)):
            raise ToolInputError(f"{name}: field {key} must be an integer, got {_json_type(value)}")
        out[key] = value
    return out


def _json_type(value: object) -> str:
    return {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "an array",
        dict: "an object",
    }.get(type(value), "null" if value is None else type(value).__name__)


def clip(text: str, limit: int = MAX_RESULT_CHARS) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... cut: {len(text) - limit} more characters not shown]"


def numbered(text: str, first: int = 1) -> str:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return "\n".join(f"{i:6d}\t{line}" for i, line in enumerate(lines, first))


async def execute(host: AgentHost, name: str, raw: object) -> ToolResult:
    """Run one tool call. Bad input and refused paths/edits come back as error results; only
    AgentStopped (and cancellation) propagate, so the agent's loop always continues."""
    try:
        args = validate(name, raw)
        return await _run(host, name, args)
    except ToolInputError as exc:
        return ToolResult(f"Invalid input: {exc}", is_error=True)
    except WorkspaceError as exc:
        return ToolResult(str(exc), is_error=True)
    except AgentStopped:
        raise
    except Exception as exc:  # a host failure must not end the agent's run
        return ToolResult(
            f"portside could not run {name}: {type(exc).__name__}: {exc}", is_error=True
        )


async def _run(host: AgentHost, name: str, a: dict[str, Any]) -> ToolResult:
    ws = host.workspace
    if name == "list_files":
        files = ws.list_files(a.get("pattern"), limit=a.get("limit") or 1000)
        if not files:
            return ToolResult("(no files match)")
        more = (
            f"\n[... more files not listed: limit {len(files)} reached]" if files.truncated else ""
        )
        return ToolResult(clip("\n".join(files)) + more)
    if name == "read_file":
        start, end = a.get("start_line"), a.get("end_line")
        text = ws.read_file(a["path"], start, end)
        if start is None and end is None:
            return ToolResult(clip(numbered(text)) if text else f"({a['path']} is empty)")
        total = ws.read_file(a["path"]).count("\n") + 1
        return ToolResult(
            f"{a['path']} lines {start or 1}-{end or total} of about {total}:\n"
            + clip(numbered(text, start or 1))
        )
    if name == "grep":
        hits = ws.grep(a["pattern"], a.get("glob"), limit=a.get("limit") or 200)
        if not hits:
            return ToolResult("(no matches)")
        body = "\n".join(f"{h.path}:{h.line}: {h.text}" for h in hits)
        more = "\n[... more matches not shown: limit reached]" if hits.truncated else ""
        return ToolResult(clip(body) + more)
    if name == "propose_edit":
        outcome = await host.propose_replace(a["path"], a["old"], a["new"], a["rationale"])
        return edit_result(outcome, a["path"])
    if name == "write_file":
        outcome = await host.propose_write(a["path"], a["content"], a["rationale"])
        return edit_result(outcome, a["path"])
    if name == "run_reference":
        return ToolResult(clip(await host.run_reference()))
    if name == "run_candidate":
        return ToolResult(clip(await host.run_candidate()))
    if name == "read_run_log":
        text = host.read_run_log(a.get("run") or "last", a.get("tail") or 50, a.get("grep"))
        return ToolResult(clip(text) if text else "(no output)")
    if name == "finish":
        answer = await host.claim(a["summary"])
        return ToolResult(clip(answer or "Claim recorded."), claimed=True)
    raise ToolInputError(f"unknown tool {name!r}")  # unreachable: validate() knows the names


def edit_result(outcome: EditOutcome, path: str) -> ToolResult:
    """What the agent is told about its proposal."""
    if outcome.status == "applied":
        text = f"Edit {outcome.edit_id} to {path} was approved and applied."
        if outcome.applied_text is not None:
            text += " The reviewer changed it before applying; the file now reads:\n" + clip(
                numbered(outcome.applied_text)
            )
        return ToolResult(text)
    if outcome.status == "rejected":
        reason = outcome.message.strip() or "(no reason given)"
        return ToolResult(
            f"The reviewer rejected this edit: {reason}", is_error=True, rejected=True
        )
    return ToolResult(f"The edit was not applied: {outcome.message}", is_error=True)
