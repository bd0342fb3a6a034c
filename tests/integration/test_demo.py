"""The embedded demo, headless: the recorded port with the clipping change fails; the port
with the reviewer's fix (the recording's alternative) passes with no error alarm."""

from __future__ import annotations

import asyncio
import csv
import io
import json
from pathlib import Path

import pytest
from cli_run import cli

from portside.store import Store

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # the whole demo with its real runs
def test_demo_headless_auto_catches_the_clipping_change(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    res = cli("demo", "--headless", "--policy", "auto", "--json", db=db, timeout=900)
    assert res.returncode == 1, res.stderr[-3000:]
    assert "scripted agent" in res.stderr  # labelled as scripted, wherever it shows
    data = json.loads(res.stdout)
    sid = data["session"]
    with Store(db) as store:
        info = store.session(sid)
        assert info["agent"] == "scripted:agent.jsonl" and info["verdict"] == "fail"
        refs = [r for r in store.runs(sid) if r["role"] == "reference"]
        assert [r["outcome"] for r in refs] == ["passed", "passed"]
        checks = {a["check"]: a["severity"] for a in store.alarms(sid)}
        assert "clipping-changed" in checks
        assert checks["agent-claim-contradicted"] == "critical"
        assert "recompilation" not in {k for k, v in checks.items() if v in ("error", "critical")}
    out = cli("export", sid, "--what", "interventions", "--format", "csv", db=db)
    assert out.returncode == 0, out.stderr
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    assert rows == []  # policy auto: no human intervened, and the export says so with a header
    assert out.stdout.startswith("session,")


@pytest.mark.slow  # the whole demo with its real runs
def test_demo_port_with_clipping_kept_passes(tmp_path: Path) -> None:
    """The recording's alternative edit (what a reviewer's rejection leads to) is a correct port:
    the defaults must raise no error alarm on it, on XLA:CPU when available, else on the CPU."""
    from portside.cli.demo import demo_config, find_xla_python
    from portside.core.agent.scripted import ScriptedAgent
    from portside.core.session.engine import SessionEngine

    lines = (REPO / "sessions" / "demo" / "agent.jsonl").read_text().splitlines()
    fixed = []
    for line in lines:
        if line.startswith("{") and '"if_rejected"' in line:
            step = json.loads(line)
            step = {"edit": step["if_rejected"]["edit"]}
            line = json.dumps(step)
        fixed.append(line)
    script = tmp_path / "agent-fixed.jsonl"
    script.write_text("\n".join(fixed) + "\n")
    config, _ = demo_config(policy="auto", speed=0, xla_python=find_xla_python(), headless=True,
                            workdir=tmp_path / "work")
    config.agent = ScriptedAgent(script, speed=0)
    with Store(tmp_path / "d.db") as store:
        engine = SessionEngine(config, store.recorder)
        result = asyncio.run(engine.run())
        errors = [a for a in result.candidates[-1].alarms if a.is_error]
        assert errors == [], errors
        assert result.verdict == "pass", result.reason
        acc = result.candidates[-1].summary["metrics"]["accuracy"]
        assert acc == pytest.approx(90.2, abs=1.0)
