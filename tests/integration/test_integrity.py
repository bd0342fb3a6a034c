"""A run cannot forge the evidence it is judged by (issue 24, items 3 and 7).

Real subprocesses through the real Runner; the forgers are small scripts doing what a hostile
candidate would: copy another run's records, edit their own, write records of portside's own
types, rewind their file, seal fake facts with the key they find in their environment, flood
the probe channel or stdout. Ground truth is outside the code under test: what the script
wrote, and the seal computed here with the stdlib's keyed BLAKE2b.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from portside.core.checks import RunRecords, run_checks
from portside.core.log import events as ev
from portside.core.log.criteria import Criteria
from portside.core.run import runner as runner_mod
from portside.core.run import watch_disk, watch_output
from portside.core.run.runner import Runner, RunSpec

PY = sys.executable
TINY = Path(__file__).resolve().parents[1] / "fixtures" / "trainers" / "train_tiny.py"

# A forger's helpers: it reads the run's key from its environment, as the probe does.
FORGE = """
import hashlib, json, os, sys, time
OUT = os.environ["PORTSIDE_PROBE_OUT"]
KEY = os.environ.get("PORTSIDE_PROBE_SEAL", "").encode()
def body(rec, seq):
    return json.dumps(rec)[:-1] + ', "seq": %d}' % seq
def sealed(rec, seq):
    b = body(rec, seq)
    return b[:-1] + ', "mac": "%s"}' % hashlib.blake2b(b.encode(), key=KEY, digest_size=16).hexdigest()
def put(line, path=OUT):
    with open(path, "a") as fh:
        fh.write(line + "\\n")
"""


def _script(tmp: Path, name: str, body: str) -> Path:
    path = tmp / name
    path.write_text(FORGE + textwrap.dedent(body))
    return path


def _run(tmp: Path, command: str, run_id: str = "cand1-x", runner: Runner | None = None,
         role: ev.Role = "candidate", cwd: Path | None = None
         ) -> tuple[runner_mod.RunResult, list[ev.Event]]:
    events: list[ev.Event] = []
    runner = runner or Runner("s", events.append, tmp / "probe")
    spec = RunSpec(run_id=run_id, role=role, attempt=1, command=command, cwd=cwd or tmp,
                   target="cpu", env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    return asyncio.run(runner.run(spec)), events


def _of(result: runner_mod.RunResult, typ: str) -> list[dict]:
    return [r for r in result.records if r.get("type") == typ]


def _steps(n: int, pid: int = 7, start: int = 0) -> list[dict]:
    return [{"type": "step", "t": 1.0 + i, "pid": pid, "rank": 0, "step": i, "loss": 1.0 / (i + 1),
             "grad_norm": 0.5, "lr": [0.1], "step_s": 0.01} for i in range(start, start + n)]


def test_the_real_probe_passes_its_own_check(tmp_path: Path) -> None:
    """No false alarm: a real torch run's records all verify, and portside saw torch loaded
    in its process from outside."""
    res, _ = _run(tmp_path, f"{PY} {TINY} --steps 30")
    assert res.reason == "exit" and res.exit_code == 0, res.tail[-5:]
    assert not _of(res, "tamper") and not _of(res, "probe-error")
    assert res.steps == 30 and _of(res, "facts")
    assert all("mac" not in r and "seq" not in r for r in res.records)  # checked, then dropped
    seen = _of(res, "observed")[-1]
    assert seen["final"] and "torch" in seen["seen"] and seen["alive_at"]
    alarms = run_checks([], RunRecords.from_records(res.records), Criteria(), "cpu", final=False)
    assert "evidence-tampered" not in {a.kind for a in alarms}


def test_records_of_another_run_or_edited_or_unsealed_fail(tmp_path: Path) -> None:
    good = {"type": "step", "t": 1.0, "pid": 7, "rank": 0, "step": 0, "loss": 0.5}
    other = hashlib.blake2b(json.dumps(good)[:-1].encode(), key=b"another run's key",
                            digest_size=16)
    script = _script(tmp_path, "forge.py", f"""
        good = {good!r}
        put(sealed(good, 0))                                  # valid
        line = sealed(dict(good, step=1), 1)
        put(line.replace('"loss": 0.5', '"loss": 0.1'))       # edited after sealing
        put(body(dict(good, step=2), 2))                      # no seal at all
        put(body(dict(good, step=3), 3)[:-1] + ', "mac": "{other.hexdigest()}"}}')
        put(sealed(dict(good, step=4), 2))                    # replayed number
        put(sealed({{"type": "metric", "name": "accuracy", "value": 99.0, "pid": 7}}, 3))
        put(sealed({{"type": "observed", "seen": {{"tpu": ["/lib/libtpu.so"]}}, "pid": 7}}, 4))
    """)
    res, _ = _run(tmp_path, f"{PY} {script}")
    whys = [r["why"] for r in _of(res, "tamper")]
    assert len(whys) == 6, whys
    assert sum("seal does not match" in w for w in whys) == 2  # edited, another key
    assert sum(w == "unsealed record" for w in whys) == 1
    assert any("record 2 where" in w for w in whys)
    assert sum("portside's own" in w for w in whys) == 2
    assert [r["step"] for r in _of(res, "step")] == [0]  # only the valid one is kept
    assert not [r for r in res.records if r.get("type") == "metric"]  # the forged goal metric
    rr = RunRecords.from_records(res.records)
    alarms = run_checks([], rr, Criteria(), "cpu", final=True)
    tampered = [a for a in alarms if a.kind == "evidence-tampered"]
    assert tampered and tampered[0].severity == "critical"
    assert tampered[0].evidence.failed == 6


def test_packed_steps_are_checked_expanded_and_refused_when_malformed(tmp_path: Path) -> None:
    """Steps packed by column (FORMAT.md) are sealed and numbered as one line: the runner
    expands a good one into its records; a malformed one, sealed or not, is a probe-error
    that says why, and the lines around it are still read; an edited one fails its seal."""
    script = _script(tmp_path, "packed.py", """
        import base64, struct
        def packed(first, count, **change):
            n = count
            d = lambda xs: base64.b64encode(struct.pack("<%dd" % len(xs), *xs)).decode()
            rec = {"type": "steps", "t": 1.0, "pid": 7, "rank": 0, "n": n,
                   "keys": ["type", "t", "pid", "rank", "step", "loss", "lr"],
                   "cols": [{"c": "step"}, {"d": d([1.0 + i for i in range(n)])}, {"c": 7},
                            {"c": 0}, {"j": list(range(first, first + n))},
                            {"d": d([0.5 / (first + i + 1) for i in range(n)])},
                            {"l": d([0.1] * n), "k": 1}]}
            rec.update(change)
            return rec
        put(sealed(packed(0, 3), 0))                                  # steps 0..2
        put(sealed(packed(3, 2, n=10**9), 1))                         # a billion rows
        put(sealed(packed(3, 2, cols=[{"c": "step"}] + [{"d": "!!"}] * 6), 2))
        put(sealed(packed(3, 2), 3))                                  # steps 3, 4
        put(sealed(packed(5, 2), 4).replace('"n": 2', '"n": 1'))     # edited after sealing
    """)
    res, _ = _run(tmp_path, f"{PY} {script}")
    steps = _of(res, "step")
    assert [r["step"] for r in steps] == [0, 1, 2, 3, 4] and res.steps == 5, res.tail[-3:]
    assert steps[1] == {"type": "step", "t": 2.0, "pid": 7, "rank": 0, "step": 1, "loss": 0.25,
                        "lr": [0.1]}
    errors = [r["line"] for r in _of(res, "probe-error")]
    assert len(errors) == 2 and "n must be" in errors[0] and "not base64" in errors[1], errors
    assert [r["why"] for r in _of(res, "tamper")] == [
        "seal does not match (written without this run's key, or edited)"]


def test_a_rewound_or_replaced_file_fails(tmp_path: Path) -> None:
    script = _script(tmp_path, "rewind.py", """
        for i in range(3):
            put(sealed({"type": "step", "t": 1.0, "pid": 7, "rank": 0, "step": i}, i))
        time.sleep(1.0)                       # the runner reads these
        open(OUT, "w").close()                # then the run truncates its file
        time.sleep(1.0)
        tmp = OUT + ".new"
        put(sealed({"type": "step", "t": 1.0, "pid": 8, "rank": 0, "step": 0}, 0), tmp)
        os.replace(tmp, OUT)                  # and swaps in another
        time.sleep(1.0)
    """)
    res, _ = _run(tmp_path, f"{PY} {script}")
    whys = " | ".join(r["why"] for r in _of(res, "tamper"))
    assert "shrank" in whys and "replaced" in whys, whys


def test_another_runs_records_are_not_even_visible_in_the_sandbox(tmp_path: Path) -> None:
    from portside.core.run.sandbox import Sandbox, unavailable

    if unavailable():
        pytest.skip(f"no sandbox here: {unavailable()}")
    project, work = tmp_path / "proj", tmp_path / "work"
    tree = work / "tree"  # the run's cwd, as an agent's workspace is: beside the probe folder
    project.mkdir()
    tree.mkdir(parents=True)
    events: list[ev.Event] = []
    runner = Runner("s", events.append, work / "probe")
    runner.use_sandbox(Sandbox.for_project(project, work))
    ref = _script(tree, "ref.py", """
        put(sealed({"type": "step", "t": 1.0, "pid": 7, "rank": 0, "step": 0}, 0))
    """)
    _run(work, f"{PY} {ref}", run_id="ref1-a", runner=runner, role="reference", cwd=tree)
    ref_file = work / "probe" / "ref1-a" / "ref1-a.jsonl"
    assert ref_file.exists()
    spy = _script(tree, "spy.py", f"""
        root = os.path.dirname(os.path.dirname(OUT))
        print("listing", sorted(os.listdir(root)) if os.path.isdir(root) else "none", flush=True)
        try:
            print("read", len(open({str(ref_file)!r}).read()), flush=True)
        except OSError as e:
            print("refused", type(e).__name__, flush=True)
        try:
            open({str(ref_file)!r}, "a").write("x")
            print("wrote", flush=True)
        except OSError as e:
            print("refused-write", type(e).__name__, flush=True)
    """)
    res, _ = _run(work, f"{PY} {spy}", run_id="cand1-b", runner=runner, cwd=tree)
    said = "\n".join(res.tail)
    assert "listing ['cand1-b']" in said, said  # only its own folder
    assert "refused FileNotFoundError" in said and "refused-write" in said, said
    assert ref_file.read_bytes().count(b"\n") == 1


def test_insider_sealed_facts_claiming_a_tpu_are_held_to_what_ran(tmp_path: Path) -> None:
    """Code that reads the key can seal what it likes; what its processes mapped it cannot
    choose: facts claiming a TPU with no libtpu mapped and no /dev/accel open."""
    script = _script(tmp_path, "insider.py", """
        facts = {"type": "facts", "t": time.time(), "pid": 4242, "rank": 0, "backend": "torch_xla",
                 "device_kind": "TPU", "device_name": "TPU v5 lite", "device_count": 1}
        put(sealed(facts, 0))
        for i in range(5):
            put(sealed({"type": "step", "t": time.time(), "pid": 4242, "rank": 0, "step": i,
                        "loss": 1.0 / (i + 1), "grad_norm": 0.5, "lr": [0.1]}, i + 1))
        time.sleep(2.5)                       # a training run lives on after its first step
    """)
    res, _ = _run(tmp_path, f"{PY} {script}")
    assert not _of(res, "tamper")  # the seal holds: it had the key
    rr = RunRecords.from_records(res.records)
    alarms = run_checks([], rr, Criteria(), "tpu:v5e", final=True)
    hw = [a for a in alarms if a.key == "evidence-tampered:hardware"]
    assert hw and hw[0].severity == "critical", [a.key for a in alarms]
    assert "tpu" not in hw[0].evidence.observed
    assert "wrong-hardware" not in {a.kind for a in alarms}  # the facts alone would pass


def test_a_300mb_record_is_refused_without_holding_it(tmp_path: Path) -> None:
    script = _script(tmp_path, "flood.py", """
        with open(OUT, "ab") as fh:
            chunk = b"x" * (1 << 20)
            for _ in range(300):
                fh.write(chunk)
            fh.write(b"\\n")
        put(sealed({"type": "step", "t": 1.0, "pid": 7, "rank": 0, "step": 0}, 0))
    """)
    me = psutil.Process()
    before = me.memory_info().rss
    res, _ = _run(tmp_path, f"{PY} {script}")
    grew = (me.memory_info().rss - before) / 2**20
    assert grew < 120, f"the runner grew by {grew:.0f} MB reading a 300 MB line"
    errors = _of(res, "probe-error")
    assert len(errors) == 1 and "refused" in errors[0]["line"], errors
    assert [r["step"] for r in _of(res, "step")] == [0]  # the next record still counts


def test_output_past_the_cap_keeps_head_and_tail_and_says_so(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch_output, "OUTPUT_HEAD_BYTES", 20_000)
    monkeypatch.setattr(watch_output, "OUTPUT_TAIL_LINES", 50)
    script = tmp_path / "loud.py"
    script.write_text("for i in range(20000):\n    print(f'line {i:05d} ' + 'y' * 40)\n"
                      "print('accuracy=12.5')\n")
    res, events = _run(tmp_path, f"{PY} {script}")
    lines = [x for e in events if isinstance(e, ev.RunOutput) for x in e.lines]
    stored = sum(len(x) + 4 for x in lines)
    assert stored < 20_000 + 50 * 60 + 500
    assert lines[0] == "line 00000 " + "y" * 40  # the head as printed
    assert lines[-1] == "accuracy=12.5" and lines[-2].startswith("line 19999")  # the tail
    note = next(x for x in lines if x.startswith("[portside:"))
    head = lines.index(note)
    gone = 20001 - head - 50
    assert f"{gone} lines" in note and "not stored" in note
    assert res.exit_code == 0
    # ... and the report says so too.
    from portside.core.log.bus import EventBus
    from portside.store import Store
    from portside.store.exports import report_md

    with Store(tmp_path / "s.db") as store:
        bus = EventBus(store.recorder)
        bus.publish(ev.SessionStarted(session_id="s", project="/p", target="cpu"))
        for e in events:
            bus.publish(e)
        store.recorder.flush()
        report = report_md(store, "s")
    assert f"- Output of cand1-x: portside: {gone} lines" in report, report


def test_a_run_that_fills_its_disk_is_stopped_as_resource_limit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 24 item 6: the workspace's disk is the host's; a run filling it is stopped before
    it is full, as a classified outcome."""
    import subprocess

    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs",
                                            str(disk)], capture_output=True).returncode:
        pytest.skip("needs root to mount a small tmpfs")
    try:
        monkeypatch.setattr(watch_disk, "DISK_RESERVE_BYTES", 16 << 20)
        monkeypatch.setattr(watch_disk, "DISK_CHECK_S", 0.2)
        script = disk / "fill.py"
        script.write_text("import time\nwith open('big', 'wb') as fh:\n    for i in range(60):\n"
                          "        fh.write(b'z' * (1 << 20)); fh.flush(); time.sleep(0.05)\n")
        res, _ = _run(tmp_path, f"{PY} {script}", cwd=disk)
        assert res.reason == "resource-limit", (res.reason, res.tail[-3:])
        assert "nearly full" in res.error_message and str(disk) in res.error_message
        free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
        assert free > 4 << 20, f"only {free >> 20} MiB left"
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


@pytest.mark.timeout(120)
def test_a_fifo_or_a_link_in_the_probe_folder_is_refused_not_read(tmp_path: Path) -> None:
    # Issue 38.7: a FIFO named like a record file froze portside's loop in open() (timeout,
    # stall and SIGTERM never fired); a link to a host file had portside, as root, read it
    # and keep its lines as evidence.
    secret = tmp_path / "host-secret"
    secret.write_text("SENTINEL-host-line\n")
    secret.chmod(0o600)
    script = _script(tmp_path, "fifo.py", f"""
        d = os.path.dirname(OUT)
        os.mkfifo(os.path.join(d, "a-fifo.jsonl"))
        os.symlink({str(secret)!r}, os.path.join(d, "b-link.jsonl"))
        for i in range(3):
            put(sealed({{"type": "step", "t": 1.0, "pid": 7, "rank": 0, "step": i}}, i))
        time.sleep(1.5)
    """)
    res, events = _run(tmp_path, f"{PY} {script}")
    assert res.reason == "exit" and res.exit_code == 0, (res.reason, res.tail)
    whys = " | ".join(r["why"] for r in _of(res, "tamper"))
    assert "not a regular file" in whys and "a link" in whys, whys
    assert len(_of(res, "step")) == 3
    everything = json.dumps(res.records) + "".join(repr(e) for e in events)
    assert "SENTINEL" not in everything


def _sandboxed(tmp_path: Path) -> tuple[Runner, Path, Path]:
    from portside.core.run.sandbox import Sandbox, unavailable

    if unavailable():
        pytest.skip(f"no sandbox here: {unavailable()}")
    project, work = tmp_path / "proj", tmp_path / "work"
    tree = work / "tree"
    project.mkdir()
    tree.mkdir(parents=True)
    runner = Runner("s", lambda e: None, work / "probe")
    runner.use_sandbox(Sandbox.for_project(project, work))
    return runner, work, tree


FAKE_TPU = """
    import mmap, shutil
    # a file named like the TPU runtime in its private /tmp, mapped; a regular file named
    # like the TPU's device node in the sandbox's /dev, held open
    lib = "/tmp/libtpu.so"
    shutil.copy(sys.executable, lib)
    fh = open(lib, "rb")
    m = mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ)
    try:
        dev = open("/dev/accel0", "w")
    except OSError:
        dev = None  # /dev is read-only now (tests/integration/test_sandbox_reach.py)
    facts = {"type": "facts", "t": time.time() + AHEAD, "pid": 4242, "rank": 0,
             "backend": "torch_xla", "device_kind": "TPU", "device_name": "TPU v5 lite",
             "device_count": 1}
    put(sealed(facts, 0))
    for i in range(5):
        put(sealed({"type": "step", "t": time.time(), "pid": 4242, "rank": 0, "step": i,
                    "loss": 1.0 / (i + 1), "grad_norm": 0.5, "lr": [0.1]}, i + 1))
    time.sleep(2.5)
"""


@pytest.mark.parametrize("variant", ["names", "clock ahead", "not named python"])
def test_a_cpu_run_cannot_pass_as_a_tpu_by_names_times_or_process_names(
        tmp_path: Path, variant: str) -> None:
    # Issue 38.1-3, as root in the sandbox: a fake libtpu mapped from its private /tmp, a
    # regular file opened as /dev/accel0, facts rewritten; the same with the facts' `t` ten
    # years ahead; the same under a copy of its interpreter not named python*. Each passed
    # (no evidence-tampered) before.
    runner, work, tree = _sandboxed(tmp_path)
    ahead = 10 * 365 * 86400 if variant == "clock ahead" else 0
    script = _script(tree, "fake.py", f"AHEAD = {ahead}\n" + textwrap.dedent(FAKE_TPU))
    cmd = f"{PY} {script}"
    if variant == "not named python":
        cmd = f"cp {PY} /tmp/trainer && /tmp/trainer {script}"
    res, _ = _run(work, cmd, runner=runner, cwd=tree)
    assert res.exit_code == 0, res.tail
    assert not _of(res, "tamper")
    rr = RunRecords.from_records(res.records)
    alarms = run_checks([], rr, Criteria(), "tpu:v5e", final=True)
    hw = [a for a in alarms if a.key == "evidence-tampered:hardware"]
    assert hw and hw[0].severity == "critical", [a.title for a in alarms]
    assert "tpu" not in hw[0].evidence.observed
