"""The runner with real subprocesses: stalls, orphans, crashes, secrets, output metrics."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from portside.core.log import events as ev
from portside.core.run.runner import OutputPattern, Runner, RunSpec, parse_traceback, scrub_env

PY = sys.executable


def _script(tmp: Path, name: str, body: str) -> Path:
    path = tmp / name
    path.write_text(textwrap.dedent(body))
    return path


def _run(tmp: Path, command: str, **kw: object) -> tuple[object, list[ev.Event]]:
    events: list[ev.Event] = []
    runner = Runner("s", events.append, tmp / "probe")
    spec = RunSpec(run_id=kw.pop("run_id", "r1"), role="candidate", attempt=1, command=command,
                   cwd=tmp, target="cpu", **kw)  # type: ignore[arg-type]
    result = asyncio.run(runner.run(spec))
    return result, events


def test_hang_is_stalled_and_killed_within_limit(tmp_path: Path) -> None:
    script = _script(tmp_path, "hang.py", """
        import time
        print("starting", flush=True)
        time.sleep(600)
    """)
    t0 = time.monotonic()
    result, events = _run(tmp_path, f"{PY} {script}", stall_s=2.0)
    elapsed = time.monotonic() - t0
    assert result.reason == "stalled"
    assert elapsed < 2.0 + 2.0 + 1.5  # stall limit + 2 s, plus interpreter start
    assert "no step record and no output for 2 s" in result.error_message
    assert any(isinstance(e, ev.RunOutput) and "starting" in e.lines for e in events)


def test_children_that_hang_leave_no_process(tmp_path: Path) -> None:
    script = _script(tmp_path, "spawn.py", """
        import os, subprocess, sys, time
        a = subprocess.Popen(["sleep", "1000"])
        b = subprocess.Popen(["sleep", "1001"], start_new_session=True)  # escapes the group
        c = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1002)"])
        print("pids", a.pid, b.pid, c.pid, flush=True)
        time.sleep(1000)
    """)
    result, events = _run(tmp_path, f"{PY} {script}", timeout_s=3.0)
    assert result.reason == "timeout"
    line = next(line for e in events if isinstance(e, ev.RunOutput) for line in e.lines
                if line.startswith("pids"))
    pids = [int(p) for p in line.split()[1:]]
    time.sleep(0.3)
    alive = [p for p in pids if psutil.pid_exists(p)
             and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert alive == []


def test_crash_captures_traceback_type_and_message(tmp_path: Path) -> None:
    script = _script(tmp_path, "crash.py", """
        def train():
            raise RuntimeError("boom at step 3: shapes [4, 8] vs [8, 2]")
        print("step 1")
        train()
    """)
    result, _ = _run(tmp_path, f"{PY} {script}")
    assert result.reason == "crashed"
    assert result.exit_code == 1
    assert result.error_type == "RuntimeError"
    assert result.error_message == "boom at step 3: shapes [4, 8] vs [8, 2]"


def test_exit_zero_without_training_has_no_step_records(tmp_path: Path) -> None:
    script = _script(tmp_path, "noop.py", """
        import sys, torch
        print("loading config", flush=True)
        sys.exit(0)
    """)
    result, events = _run(tmp_path, f"{PY} {script}")
    assert (result.reason, result.exit_code, result.steps) == ("exit", 0, 0)
    finished_kinds = {type(e).__name__ for e in events}
    assert "RunStarted" in finished_kinds


def test_secrets_never_reach_the_run(tmp_path: Path) -> None:
    script = _script(tmp_path, "env.py", """
        import os
        for k in sorted(os.environ):
            print("ENV", k, flush=True)
    """)
    env = dict(os.environ, ANTHROPIC_API_KEY="sk-ant-secret", HF_TOKEN="hf", DB_SECRET="x",
               AWS_SECRET_ACCESS_KEY="y", SAFE_SETTING="1")
    _, events = _run(tmp_path, f"{PY} {script}", env=env)
    names = {line.split()[1] for e in events if isinstance(e, ev.RunOutput) for line in e.lines
             if line.startswith("ENV ")}
    assert "SAFE_SETTING" in names and "PORTSIDE_PROBE_OUT" in names
    assert not names & {"ANTHROPIC_API_KEY", "HF_TOKEN", "DB_SECRET"}
    assert "sk-ant-secret" not in repr(events)
    assert "AWS_SECRET_ACCESS_KEY" not in scrub_env({"AWS_SECRET_ACCESS_KEY": "y"})


def test_output_patterns_become_metric_records(tmp_path: Path) -> None:
    script = _script(tmp_path, "acc.py", """
        print("epoch 1 accuracy=81.25")
        print("epoch 2 accuracy=88.5")
    """)
    pat = OutputPattern.compile("accuracy", r"accuracy=(?P<value>[0-9.]+)")
    result, events = _run(tmp_path, f"{PY} {script}", patterns=[pat])
    values = [r["value"] for r in result.records if r.get("type") == "metric"]
    assert values == [81.25, 88.5]
    assert any(isinstance(e, ev.RunRecord) for e in events)


def test_metric_points_past_the_cap_keep_the_first_and_the_last(tmp_path: Path) -> None:
    # Issue 38.10: every matching line was a metric record (3M lines: 2.96 GB RSS, a 758 MB
    # database). The first MAX_METRIC_POINTS stay, then only the newest, said at the end.
    # A literal, not the constant: the test names the bound it holds the runner to.
    MAX_METRIC_POINTS = 10_000
    n = MAX_METRIC_POINTS + 15_000
    script = _script(tmp_path, "flood.py", f"""
        import sys
        sys.stdout.write("".join(f"accuracy={{i}}\\n" for i in range({n})))
    """)
    pat = OutputPattern.compile("accuracy", r"accuracy=(?P<value>[0-9.]+)")
    result, _ = _run(tmp_path, f"{PY} {script}", patterns=[pat])
    got = [r for r in result.records if r.get("type") == "metric"]
    assert len(got) == MAX_METRIC_POINTS + 1, len(got)
    assert [r["value"] for r in got[:3]] == [0.0, 1.0, 2.0]
    assert got[-1]["value"] == n - 1  # the goal test reads the last value
    assert got[-1]["thinned"] == n - MAX_METRIC_POINTS - 1


def test_hostile_output_is_kept_but_decoded_safely(tmp_path: Path) -> None:
    script = _script(tmp_path, "bytes.py", r"""
        import sys
        sys.stdout.buffer.write(b"bad \xff\xfe utf8\n")
        sys.stdout.buffer.write(b"x" * 3_000_000 + b"\n")
        sys.stdout.buffer.write(b"after\n")
    """)
    result, events = _run(tmp_path, f"{PY} {script}")
    lines = [line for e in events if isinstance(e, ev.RunOutput) for line in e.lines]
    assert "bad \ufffd\ufffd utf8" in lines
    assert lines[-1] == "after"
    assert result.reason == "exit"


def test_abort_kills_the_process_group(tmp_path: Path) -> None:
    script = _script(tmp_path, "long.py", """
        import time
        while True:
            print("tick", flush=True)
            time.sleep(0.1)
    """)
    events: list[ev.Event] = []
    runner = Runner("s", events.append, tmp_path / "probe")
    spec = RunSpec(run_id="r9", role="candidate", attempt=1, command=f"{PY} {script}",
                   cwd=tmp_path, target="cpu")

    async def go() -> object:
        task = asyncio.create_task(runner.run(spec))
        await asyncio.sleep(1.0)
        assert runner.abort("r9")
        return await task

    result = asyncio.run(go())
    assert result.reason == "aborted"


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (["Traceback (most recent call last):", '  File "t.py", line 1', "KeyError: 'lr'"],
         ("KeyError", "'lr'")),
        (["Traceback (most recent call last):", "  x", "torch.OutOfMemoryError: CUDA out"],
         ("torch.OutOfMemoryError", "CUDA out")),
        (["all good"], ("", "")),
    ],
)
def test_parse_traceback(lines: list[str], expected: tuple[str, str]) -> None:
    assert parse_traceback(lines) == expected


def test_command_not_found_says_so(tmp_path: Path) -> None:
    result, _ = _run(tmp_path, "no-such-trainer --epochs 1")
    assert (result.reason, result.exit_code) == ("crashed", 127)
    assert result.error_type == "CommandNotFound"
    assert "no-such-trainer" in result.error_message and "not found" in result.error_message


def test_nonzero_exit_without_traceback_reports_last_line(tmp_path: Path) -> None:
    script = _script(tmp_path, "die.py", """
        import sys
        print("loading shards", flush=True)
        print("fatal: checkpoint step_400.pt is truncated", file=sys.stderr, flush=True)
        sys.exit(3)
    """)
    result, _ = _run(tmp_path, f"{PY} {script}")
    assert (result.reason, result.exit_code) == ("crashed", 3)
    assert result.error_message == "fatal: checkpoint step_400.pt is truncated"


DAEMONS = """
import os, subprocess, sys, time
token = sys.argv[1]
for i in range(50):
    if i % 2:  # setsid() child that stays a child of the run
        subprocess.Popen(["sleep", f"{token}{i:02d}"], start_new_session=True)
        continue
    if os.fork() == 0:  # double fork: the grandchild is orphaned at once
        os.setsid()
        if os.fork() == 0:
            os.execvp("sleep", ["sleep", f"{token}{i:02d}"])
        os._exit(0)
    os.wait()
print("spawned", flush=True)
if len(sys.argv) > 2:
    time.sleep(1000)
"""


def _alive(token: str) -> list[int]:
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        cmd = p.info["cmdline"] or []
        if len(cmd) == 2 and cmd[0] == "sleep" and cmd[1].startswith(token) \
                and p.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(p.pid)
    return found


@pytest.mark.parametrize("sandboxed", [False, True], ids=["subreaper", "pid-namespace"])
@pytest.mark.parametrize("ending", ["exits", "timeout"])
def test_fifty_daemons_do_not_outlive_their_run(tmp_path: Path, sandboxed: bool,
                                                ending: str) -> None:
    """Issue 13: children that setsid() or double-fork escaped the reaper (48 of 50 alive)."""
    from portside.core.run.sandbox import Sandbox, unavailable

    if sandboxed and unavailable():
        pytest.skip(f"no sandbox here: {unavailable()}")
    token = f"1000.{os.getpid()}{int(time.time() * 1000) % 100000}"
    script = _script(tmp_path, "daemons.py", DAEMONS)
    events: list[ev.Event] = []
    runner = Runner("s", events.append, tmp_path / "probe")
    if sandboxed:
        runner.use_sandbox(Sandbox.for_project(tmp_path / "no-project"))
    hang = " hang" if ending == "timeout" else ""
    spec = RunSpec(run_id="d1", role="candidate", attempt=1, cwd=tmp_path, target="cpu",
                   command=f"{PY} {script} {token}{hang}", timeout_s=4.0)
    result = asyncio.run(runner.run(spec))
    assert any("spawned" in e.lines for e in events if isinstance(e, ev.RunOutput)), result.tail
    assert result.reason == ("timeout" if hang else "exit")
    time.sleep(0.3)
    alive = _alive(token)
    for pid in alive:  # never leave them behind, even when the test fails
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).kill()
    assert alive == []
    # Orphans reparented to us (the subreaper) were reaped: no zombies of theirs either.
    zombies = [c for c in psutil.Process().children() if c.status() == psutil.STATUS_ZOMBIE]
    assert zombies == [], [(z.pid, z.ppid(), z.name(), [p.pid for p in psutil.Process().children()]) for z in zombies]


def test_a_trickle_is_batched_but_the_first_line_after_quiet_is_not_held(tmp_path: Path) -> None:
    """30 lines over 3 s (one each 0.1 s), then quiet, then one more: few events, no line held
    past ~1 s, no metric record past ~0.5 s, and the lines after quiet shown at once. Times
    are CLOCK_MONOTONIC on both sides (the child prints when it wrote each line)."""
    script = _script(tmp_path, "trickle.py", """
        import time
        time.sleep(0.5)
        for i in range(30):
            print(f"at={time.monotonic():.6f} loss={i}", flush=True)
            time.sleep(0.1)
        time.sleep(1.5)
        print(f"at={time.monotonic():.6f} loss=99", flush=True)
        time.sleep(0.5)
    """)
    seen: list[tuple[float, ev.Event]] = []
    runner = Runner("s", lambda e: seen.append((time.monotonic(), e)), tmp_path / "probe")
    pat = OutputPattern.compile("loss", r"loss=(?P<value>[0-9]+)")
    spec = RunSpec(run_id="r1", role="candidate", attempt=1, command=f"{PY} {script}",
                   cwd=tmp_path, target="cpu", patterns=[pat])
    result = asyncio.run(runner.run(spec))
    assert result.reason == "exit"
    outs = [(t, e) for t, e in seen if isinstance(e, ev.RunOutput)]
    lines = [(t, float(line.split()[0][3:])) for t, e in outs for line in e.lines]
    assert len(lines) == 31
    waits = [t - wrote for t, wrote in lines]
    assert waits[0] < 0.3, "the first line (after 0.5 s of quiet) was held"
    assert waits[-1] < 0.3, "the line after 1.5 s of quiet was held"
    assert max(waits) < 1.3, f"a line waited {max(waits):.2f} s"
    # One event per 0.1 s tick would be ~31; held to ~1 s (or 10 lines) it is a handful.
    assert len(outs) <= 8, f"{len(outs)} run.output events for 31 lines"
    recs = [(t, r) for t, e in seen if isinstance(e, ev.RunRecord) for r in e.records
            if r.get("type") == "metric"]  # not portside's own observed records
    assert [r["value"] for _, r in recs] == [*map(float, range(30)), 99.0]
    rec_events = sum(1 for _, e in seen if isinstance(e, ev.RunRecord))
    assert rec_events <= 12, f"{rec_events} run.record events for 31 records"
    by_value = {r["value"]: t for t, r in recs}
    rec_waits = [by_value[float(i)] - lines[i][1] for i in range(30)]
    assert max(rec_waits) < 0.8, f"a metric record waited {max(rec_waits):.2f} s"


STANDIN = """
import asyncio, sys
from pathlib import Path
from portside.core.run.runner import Runner, RunSpec
tmp, token = Path(sys.argv[1]), sys.argv[2]
runner = Runner("s", lambda e: None, tmp / "probe")
if sys.argv[3] == "sandboxed":
    from portside.core.run.sandbox import Sandbox
    runner.use_sandbox(Sandbox.for_project(tmp / "no-project"))
spec = RunSpec(run_id="o1", role="candidate", attempt=1, cwd=tmp, target="cpu",
               command=f"sleep {token}", timeout_s=600.0)
asyncio.run(runner.run(spec))
"""


@pytest.mark.parametrize("sandboxed", [False, True], ids=["subreaper", "pid-namespace"])
def test_a_run_does_not_outlive_a_portside_killed_without_cleanup(tmp_path: Path,
                                                                  sandboxed: bool) -> None:
    """portside SIGKILLed mid-run (no cleanup of its own): the run's command is gone within a
    few seconds anyway. Unsandboxed runs used to stay (their subreaper did not watch its
    parent); sandboxed ones end with bwrap's --die-with-parent."""
    import subprocess

    from portside.core.run.sandbox import unavailable

    if sandboxed and unavailable():
        pytest.skip(f"no sandbox here: {unavailable()}")
    token = f"1000.{os.getpid()}{int(time.time() * 1000) % 100000}"
    standin = _script(tmp_path, "standin.py", STANDIN)
    mode = "sandboxed" if sandboxed else "plain"
    proc = subprocess.Popen([PY, str(standin), str(tmp_path), token, mode])
    try:
        deadline = time.monotonic() + 20
        while not _alive(token) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert _alive(token), "the run never started"
        proc.kill()
        proc.wait(timeout=10)
        deadline = time.monotonic() + 6  # the reaper's poll and its grace, with room to spare
        while _alive(token) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = _alive(token)
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in _alive(token):  # never leave them behind, even when the test fails
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).kill()
    assert left == []
