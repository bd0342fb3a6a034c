"""Output lines over 1 MiB keep their start visibly (issue 13 item 10), and `verify` has a
default stall limit, so an unattended run never hangs (issue 13 item 4)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from click.testing import CliRunner

from portside.core.log import events as ev
from portside.core.run.runner import Runner, RunSpec
from portside.core.run.watch_output import MAX_LINE_BYTES


def _lines(tmp: Path, body: str) -> list[str]:
    (tmp / "t.py").write_text(body)
    events: list[ev.Event] = []
    runner = Runner("s", events.append, tmp / "probe")
    spec = RunSpec(run_id="r1", role="candidate", attempt=1, command=f"{sys.executable} t.py",
                   cwd=tmp, target="cpu", timeout_s=60)
    result = asyncio.run(runner.run(spec))
    assert result.exit_code == 0, result.tail
    return [ln for e in events if isinstance(e, ev.RunOutput) for ln in e.lines]


def test_long_lines_keep_their_start_and_say_what_was_cut(tmp_path: Path) -> None:
    lines = _lines(tmp_path, (
        "import sys\n"
        "print('before')\n"
        "sys.stdout.write('A' * 10 + 'b' * (3 * 2**20) + '\\n')\n"  # 3 MiB: cut
        "sys.stdout.write('c' * (MAX := 2**20 - 100) + '\\n')\n"  # under 1 MiB: whole
        "print('after')\n"
    ))
    assert lines[0] == "before" and lines[-1] == "after"
    cut = lines[1]
    dropped = 10 + 3 * 2**20 - MAX_LINE_BYTES
    assert cut.startswith("A" * 10 + "b" * 1000)
    assert cut.endswith(f" … [{dropped} more bytes dropped: line longer than {MAX_LINE_BYTES} bytes]")
    assert len(cut.partition(" … [")[0]) == MAX_LINE_BYTES
    assert lines[2] == "c" * (2**20 - 100)
    assert len(lines) == 4


def test_verify_has_a_default_stall_limit(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from portside.cli import main as cli

    monkeypatch.setattr(cli, "VERIFY_STALL_S", 2.0)  # the real default is 30 min
    assert "default 1800 s" in CliRunner().invoke(cli.main, ["verify", "--help"]).output
    (tmp_path / "t.py").write_text("import time\nprint('start', flush=True)\ntime.sleep(600)\n")
    cmd = f"{sys.executable} {tmp_path / 't.py'}"
    res = CliRunner().invoke(cli.main, [
        "--db", str(tmp_path / "p.db"), "verify", "--reference", cmd, "--candidate", cmd,
        "--target", "cpu", "--reference-runs", "1", "--cwd", str(tmp_path), "--json"])
    data = json.loads(res.output.strip().splitlines()[-1])
    assert data["reference"][0]["reason"] == "stalled"
