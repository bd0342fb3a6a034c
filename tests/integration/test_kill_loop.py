"""kill -9 / `run --resume`, over and over, never changes the verdict (issue 13.2).

An agent session (the real CLI, headless, policy auto, a scripted agent with waits) whose edit
adds weight decay 0.05: uninterrupted it ends `fail` (goal-regression; the agent's claim is
contradicted). The same session is then killed with SIGKILL at least 20 times — while a
reference runs, while the agent works, while the candidate runs — and resumed each time. The
verdict must be the uninterrupted one, the log gap-free, the database intact, and no process of
any run may be left alive.
"""

from __future__ import annotations

import json
import os
import random
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from cli_run import cli_argv

from portside.core.log import events as ev
from portside.store import Store

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "fixtures" / "trainers" / "train_tiny.py"
PY = sys.executable
ENV = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "HOME": "/nonexistent"}
KILLS = 20
# [stop] off: the verdict compared across kills includes the final pass's goal-regression,
# which a candidate stopped at its optimizer-changed alarm never reaches.
CRITERIA = ('[goal]\nmetric = "accuracy"\npattern = "accuracy=(?P<value>[0-9.]+)"\n'
            'tolerance = 1.0\n[stop]\nalarms = []\n')


def _setup(tmp: Path, name: str) -> tuple[list[str], Path]:
    project = tmp / name / "project"
    project.mkdir(parents=True)
    shutil.copy(TINY, project / "train.py")
    (tmp / name / "criteria.toml").write_text(CRITERIA)
    script = tmp / name / "agent.jsonl"
    script.write_text("\n".join(json.dumps(x) for x in [
        {"say": "Porting train.py."},
        {"read": "train.py"},
        {"wait": 1.5},
        {"edit": {"path": "train.py",
                  "old": 'p.add_argument("--weight-decay", type=float, default=1e-4)',
                  "new": 'p.add_argument("--weight-decay", type=float, default=0.05)',
                  "rationale": "regularise for the TPU's larger batches"}},
        {"wait": 1.5},
        {"run": "candidate"},
        {"claim": "Ported; numerics unchanged."},
    ]) + "\n")
    db = tmp / name / "s.db"
    cmd = cli_argv("run", str(project), "--target", "cpu", "--agent", f"scripted:{script}",
                   "--reference", f"{shlex.quote(PY)} train.py --steps 80",
                   "--criteria", str(tmp / name / "criteria.toml"), "--reference-runs", "2",
                   "--headless", "--policy", "auto", "--json", "--stall", "120", db=db)
    return cmd, db


def _sid(db: Path) -> str | None:
    if not db.exists():
        return None
    try:
        conn = sqlite3.connect(db)
        row = conn.execute("SELECT session_id FROM sessions LIMIT 1").fetchone()
        conn.close()
    except sqlite3.Error:
        return None
    return row[0] if row else None


def _phase(db: Path, sid: str) -> str:
    """Where the session is: a live run's role, the agent between runs, or done/starting."""
    with Store(db) as store:
        events = list(store.events(sid, kinds=["run.started", "run.finished", "session.ended",
                                               "agent.text", "agent.tool_call"]))
    if any(isinstance(e, ev.SessionEnded) for e in events):
        return "ended"
    done = {e.run_id for e in events if isinstance(e, ev.RunFinished)}
    live = [e for e in events if isinstance(e, ev.RunStarted) and e.run_id not in done]
    if live:
        return live[-1].role
    if any(isinstance(e, ev.AgentText | ev.AgentToolCall) for e in events):
        return "agent"
    return "starting"


def _verdict(out: str) -> str:
    return json.loads(out)["verdict"]


def _leftovers(root: Path) -> list[int]:
    prefix = str(root.resolve())
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("PORTSIDE_PROBE_OUT", "").startswith(prefix):
                found.append(proc.pid)
        except (psutil.Error, OSError):
            continue
    return found


@pytest.mark.slow
def test_twenty_kills_never_change_the_verdict(tmp_path: Path) -> None:
    cmd, db = _setup(tmp_path, "calm")
    calm = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=ENV)
    assert calm.returncode in (0, 1), calm.stderr[-2000:]
    expected = _verdict(calm.stdout)
    calm_sid = _sid(db)
    assert calm_sid is not None
    with Store(db) as store:
        calm_checks = {a["check"] for a in store.alarms(calm_sid)}
    assert expected == "fail" and "goal-regression" in calm_checks  # the ground truth

    cmd, db = _setup(tmp_path, "killed")
    rng = random.Random(13)
    phases: list[str] = []
    sid: str | None = None
    deadline = time.monotonic() + 1500
    result = None
    while result is None:
        assert time.monotonic() < deadline, f"no end after {len(phases)} kills: {phases}"
        if sid is not None and _phase(db, sid) == "ended":  # the kill came after the end
            with Store(db) as store:
                result = json.dumps({"verdict": store.session(sid)["verdict"]})
            break
        argv = cmd if sid is None else cli_argv("run", "--resume", sid, "--headless", "--json",
                                                db=db)
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=ENV)
        if len(phases) >= KILLS and {"reference", "agent", "candidate"} <= set(phases):
            out, err = proc.communicate(timeout=900)
            assert proc.returncode in (0, 1), err[-3000:]
            result = out
            break
        # Kill soon after this engine shows progress of its own; every third round let it
        # finish what it is doing first, so the session moves on between kills.
        base = ev.now()
        patient = len(phases) % 3 == 2
        while proc.poll() is None:
            sid = sid or _sid(db)
            if sid is not None:
                with Store(db) as store:
                    recent = [e for e in store.events(sid, kinds=[
                        "run.started", "run.finished", "agent.tool_call", "session.state"])
                        if e.ts > base]
                # Progress: a reference that finished (not the resumed engine's own finish of
                # the run the kill cut off) or an agent step. The candidate is only ever cut
                # off, so the session ends after the last kill, never before it.
                moved = any(isinstance(e, ev.AgentToolCall) or (
                    isinstance(e, ev.RunFinished) and e.outcome != "aborted"
                    and e.run_id.startswith("ref")) for e in recent)
                if recent and (moved or not patient):
                    break
            time.sleep(0.1)
        time.sleep(rng.uniform(0.2, 2.5))
        if proc.poll() is not None:  # it ended before the kill: that is the end
            out, err = proc.communicate()
            assert proc.returncode in (0, 1), err[-3000:]
            result = out
            break
        assert sid is not None
        phases.append(_phase(db, sid))
        proc.send_signal(signal.SIGKILL)
        proc.communicate()

    print(f"kills: {len(phases)} ({', '.join(f'{k} {phases.count(k)}' for k in sorted(set(phases)))});"
          f" verdict {_verdict(result)} (uninterrupted: {expected})")
    assert len(phases) >= KILLS, phases
    assert {"reference", "agent", "candidate"} <= set(phases), phases
    assert _verdict(result) == expected, (phases, result)
    assert sid is not None
    time.sleep(1.0)
    assert _leftovers(tmp_path / "killed") == []  # no run outlived its engine
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    with Store(db) as store:
        events = list(store.events(sid))
        assert [e.seq for e in events] == list(range(1, len(events) + 1))  # gap-free
        assert sum(isinstance(e, ev.SessionEnded) for e in events) == 1
        checks = {a["check"] for a in store.alarms(sid)}
        assert "goal-regression" in checks
        aborted = [e for e in events if isinstance(e, ev.RunFinished) and e.outcome == "aborted"]
        assert aborted and all(e.reason == "engine-killed" for e in aborted)
    assert os.path.exists(db)
