"""Child for the resume test: an agent session with a reviewer, until the test kills it.

It builds the engine the way `portside run` does (durable workdir beside the database), with
policy ``ask`` and a stand-in for the screen: a reviewer who approves the edit with a note and,
when the candidate starts, sends the agent a message and writes a note. Those are real gate
interventions, committed before each gate call returns. Prints the session id first.

Usage: resume_driver.py DB PROJECT SCRIPT REFERENCE_CMD CANDIDATE_CMD
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from portside.core.agent.scripted import ScriptedAgent
from portside.core.log import events as ev
from portside.core.session.config import SessionConfig
from portside.core.session.engine import SessionEngine
from portside.store import Store

db, project, script, reference, candidate = sys.argv[1:6]
store = Store(db)
config = SessionConfig(
    project=Path(project), target="cpu", reference_command=reference,
    candidate_command=candidate, reference_runs=2, stall_s=60,
    agent=ScriptedAgent(script, speed=0), policy="ask", mode="live", isolate=True,
    work_root=Path(db).resolve().parent / "work", reviewer="tester",
    # Unconfined on purpose: the candidate writes its pid file outside the workspace, and the
    # test is about what a kill -9 leaves running (in the sandbox, --die-with-parent ends it;
    # tests/integration/test_sandbox.py).
    sandbox=False,
)
engine = SessionEngine(config, store.recorder)
gate = engine.gate


def reviewer(event: ev.Event) -> None:
    # Called inside publish: act once the engine awaits (the edit is pending by then).
    loop = asyncio.get_running_loop()
    if isinstance(event, ev.EditProposed):
        loop.call_soon(lambda: gate.approve(event.edit_id, note="docstring only: fine"))
    elif isinstance(event, ev.RunStarted) and event.role == "candidate":
        loop.call_soon(lambda: gate.message("keep clipping after the reduction"))
        loop.call_soon(lambda: gate.note("first candidate started"))


engine.bus.subscribe(reviewer)
print(engine.session_id, flush=True)
asyncio.run(engine.run())
