"""The demo's proposals as the engine publishes them: each `write`/`edit` step of
sessions/demo/agent.jsonl applied in order to sessions/demo/project, with its risk marks."""

from __future__ import annotations

import json
from pathlib import Path

from portside.core.log import events as ev
from portside.core.workspace.risk import scan

DEMO = Path(__file__).resolve().parents[1] / "sessions" / "demo"


def demo_edits(session_id: str, t0: float) -> list[ev.EditProposed]:
    files: dict[str, str] = {}
    out: list[ev.EditProposed] = []
    for line in (DEMO / "agent.jsonl").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        step = json.loads(line)
        kind = next((k for k in ("write", "edit") if k in step), None)
        if kind is None:
            continue
        spec = step[kind]
        path = spec["path"]
        src = DEMO / "project" / path
        before = files.get(path, src.read_text() if src.exists() else "")
        after = spec["content"] if kind == "write" else before.replace(spec["old"], spec["new"], 1)
        files[path] = after
        n = len(out) + 1
        out.append(ev.EditProposed(session_id=session_id, ts=t0 + n, edit_id=f"e{n}", path=path,
                                   before=before, after=after,
                                   rationale=spec.get("rationale", ""),
                                   risks=scan(before, after)))
    return out
