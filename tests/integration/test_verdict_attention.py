"""Human time in a session without an agent (issue 41 item 5): the verdict's attention starts
when every run has ended and the session sits at `awaiting verdict`, as an agent's claim's does
from the claim, not at the decision (it counted 0 s however long the reviewer read)."""

from __future__ import annotations

import asyncio
import shutil
import sys
import time
from pathlib import Path

import pytest
from doubles import MemorySink

from portside.core.log import events as ev
from portside.core.session.config import SessionConfig
from portside.core.session.engine import SessionEngine

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "fixtures" / "trainers" / "train_tiny.py"
PY = sys.executable
READ_S = 1.5  # how long the reviewer looks before deciding


@pytest.mark.slow  # two real trainer runs (~10-30 s on a loaded machine)
def test_verdict_without_agent_counts_from_awaiting_verdict(tmp_path: Path) -> None:
    project = tmp_path / "p"
    project.mkdir()
    shutil.copy(TINY, project / "train.py")
    sink = MemorySink()
    config = SessionConfig(project=project, target="cpu",
                           reference_command=f"{PY} train.py --steps 20", reference_runs=1,
                           policy="ask", mode="live", workdir=tmp_path / "work", stall_s=120,
                           reference_env={"OMP_NUM_THREADS": "1"},
                           candidate_env={"OMP_NUM_THREADS": "1"})
    engine = SessionEngine(config, sink)
    waited: list[float] = []

    async def reviewer() -> None:
        # Every run ended: the screen says `awaiting verdict`; the reviewer reads, then decides.
        while True:
            await asyncio.sleep(0.05)
            runs = list(engine.ledger.runs.values())
            if any(r.role == "candidate" for r in runs) and all(r.finished for r in runs):
                break
        seen = time.time()
        await asyncio.sleep(READ_S)
        engine.gate.note("compared the loss curves")  # another action while the verdict waits
        await asyncio.sleep(0.2)
        engine.gate.verdict("pass", "looks right")
        waited.append(time.time() - seen)

    async def main() -> None:
        rev = asyncio.create_task(reviewer())
        await asyncio.wait_for(engine.run(), 300)
        await rev

    asyncio.run(main())
    verdicts = [e for e in sink.events if isinstance(e, ev.Intervention) and e.action == "verdict"]
    assert len(verdicts) == 1
    took = verdicts[0].decided_at - verdicts[0].attention_started_at
    # From `awaiting verdict` (a moment after the last run.finished) to the decision.
    assert READ_S <= took <= waited[0] + 1.0, (took, waited)
    assert engine.ledger.human_s >= READ_S, engine.ledger.human_s
    assert verdicts[0].target_id == ""  # no claim answered: the item is the session's own
    ended = [e for e in sink.events if isinstance(e, ev.SessionEnded)]
    assert ended and ended[0].verdict == "pass"
