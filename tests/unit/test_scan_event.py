"""The session's scan as one event: written once at the start, read back whole (the agent's
task on a resume is the one it was given), and kept on a resume instead of scanned again."""

from __future__ import annotations

import asyncio
from pathlib import Path

from doubles import MemorySink

from portside.core.log import events as ev
from portside.core.scan.scan import ScanResult, scan, task_text
from portside.core.session.config import SessionConfig
from portside.core.session.engine import SessionEngine
from portside.core.session.halfway import Resumed

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "scan"


def _engine(project: Path, sink: MemorySink, resumed: Resumed | None = None) -> SessionEngine:
    config = SessionConfig(project=project, target="cpu", reference_command="true",
                           workdir=project / ".." / "work")
    return SessionEngine(config, sink, "s-1", resumed=resumed)


def test_a_scan_goes_through_the_log_whole() -> None:
    result = scan(FIXTURES / "imagenet")
    back = ScanResult.from_event(ev.decode(ev.encode(result.to_event("s-1"))))  # type: ignore[arg-type]
    assert task_text(back) == task_text(result)
    assert back.counts() == result.counts() and len(back.findings) == 19


def test_the_engine_logs_it_once_and_a_resume_keeps_it(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "train.py").write_text("import torch\nx = torch.ones(2).cuda()\n")
    sink = MemorySink()
    first = _engine(project, sink)
    asyncio.run(first._scan())
    (logged,) = [e for e in sink.events if isinstance(e, ev.ProjectScanned)]
    assert [(f.path, f.line, f.kind) for f in logged.findings] == [("train.py", 2, "cuda-call")]
    # the project changed while portside was down: the resumed session keeps what it logged
    (project / "train.py").write_text("x = 1\n")
    again = MemorySink()
    second = _engine(project, again, resumed=Resumed(log=[*sink.events]))
    asyncio.run(second._scan())
    assert not [e for e in again.events if isinstance(e, ev.ProjectScanned)]
    assert second.scan_result is not None and second.scan_result.counts() == {"cuda-call": 1}
