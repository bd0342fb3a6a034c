"""Ground truth for the probe on CPU: what it records must equal what the program itself saw."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from portside.core.probe import inject_env, probe_dir

from ._util import SCRIPTS, ProbeRun, ground_truth, read_records, steps_of


def assert_matches(stdout: str, records: list[dict], source: str) -> list[dict]:
    gt = ground_truth(stdout)
    steps = steps_of(records)
    assert len(gt) >= 3
    assert [r["step"] for r in steps] == list(range(len(gt)))
    for (step, loss, norm, lr), rec in zip(gt, steps, strict=True):
        # repr of the float the script saw == the float the probe wrote: exact, every step
        assert rec["loss"] == float(loss), step
        assert rec["grad_norm"] == float(norm), step
        assert rec["lr"] == [float(lr)], step
        assert rec["grad_norm_source"] == source
        assert rec["backward_calls"] == 1
    return steps


def test_ground_truth_clip(probe_run: ProbeRun) -> None:
    proc, out = probe_run("train_cpu.py", "--steps", "8")
    records = read_records(out)
    steps = assert_matches(proc.stdout, records, "clip")
    assert all(r["max_norm"] == 0.5 and r["clip_calls"] == 1 for r in steps)
    assert steps[0]["lr"] != steps[-1]["lr"]  # the StepLR schedule is visible
    facts = [r for r in records if r["type"] == "facts"]
    assert len(facts) == 1 and records[0] is facts[0]
    f = facts[0]
    assert (f["backend"], f["device_kind"], f["param_devices"]) == ("cpu", "CPU", ["cpu"])
    assert f["param_dtypes"] == ["torch.float32"] and f["versions"]["torch"]
    assert f["seed_offset"] == 0 and f["rank"] == 0
    assert records[-1]["type"] == "exit" and records[-1]["steps"] == 8
    assert records[-1]["reason"] == "atexit"


@pytest.mark.parametrize("api", ["split", "deprecated"])
def test_each_clipping_api_is_recorded_once(probe_run: ProbeRun, api: str) -> None:
    """get_total_norm + clip_grads_with_norm_, and the deprecated clip_grad_norm (which calls
    clip_grad_norm_): one clipping a step, with the norm the program got back."""
    proc, out = probe_run("train_cpu.py", "--steps", "5", "--clip-api", api)
    steps = assert_matches(proc.stdout, read_records(out), "clip")
    assert all(r["max_norm"] == 0.5 and r["clip_calls"] == 1 for r in steps)


def test_from_import_and_rank_file(probe_run: ProbeRun, tmp_path: Path) -> None:
    # `from torch.nn.utils import clip_grad_norm_` binds the function before the loop runs.
    proc, out = probe_run("train_cpu.py", "--import-style", "from", "--max-norm", "1.0", RANK="2")
    assert not out.exists()  # rank 2 writes beside the main file
    records = read_records(tmp_path / "probe.rank2.jsonl")
    steps = assert_matches(proc.stdout, records, "clip")
    assert all(r["max_norm"] == 1.0 and r["rank"] == 2 for r in steps)


def test_grad_scaler_loss_is_unscaled(probe_run: ProbeRun) -> None:
    proc, out = probe_run("train_cpu.py", "--scaler")
    steps = assert_matches(proc.stdout, read_records(out), "clip")
    assert all(r["loss"] < 100 for r in steps)  # scaled by 1024 it would be in the thousands


def test_no_clip_probe_computes_norm(probe_run: ProbeRun) -> None:
    # every step (unset, on CPU the stride stretches when the norm costs >0.3% of a step)
    proc, out = probe_run("train_cpu.py", "--no-clip", PORTSIDE_PROBE_NORM_EVERY="1")
    steps = assert_matches(proc.stdout, read_records(out), "probe")
    own = ground_truth(proc.stdout, "OWN")
    for rec, (_, norm64) in zip(steps, own, strict=True):
        assert rec["max_norm"] is None and rec["clip_calls"] == 0
        assert rec["grad_norm"] == pytest.approx(float(norm64), rel=1e-6)


@pytest.mark.slow  # several real training runs
def test_seed_offset(probe_run: ProbeRun, tmp_path: Path) -> None:
    offsets = (1, 1, 0)
    procs = [  # concurrently: three torch imports in a row are slow here
        subprocess.Popen(
            [sys.executable, str(SCRIPTS / "seeds.py")],
            env=probe_run.env(tmp_path / f"s{i}.jsonl", offset),
            stdout=subprocess.PIPE,
            text=True,
        )
        for i, offset in enumerate(offsets)
    ]
    outs = []
    for i, (proc, offset) in enumerate(zip(procs, offsets, strict=True)):
        stdout, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0
        outs.append(
            [
                line
                for line in stdout.splitlines()
                if line.split()[0] in {"RANDOM", "NUMPY", "TORCH", "LOSS"}
            ]
        )
        assert read_records(tmp_path / f"s{i}.jsonl")[0]["seed_offset"] == offset
    assert len(outs[0]) == 4 and outs[0] == outs[1]  # same offset: identical runs
    for a, b in zip(outs[0], outs[2], strict=True):
        assert a != b  # every RNG (random, numpy, torch) moved with the offset


def test_process_without_torch_stays_without(probe_run: ProbeRun) -> None:
    proc, out = probe_run("no_torch.py")
    assert "PROBE True" in proc.stdout  # the probe is active ...
    assert "TORCH False" in proc.stdout  # ... and did not import torch
    assert not out.exists()


def test_torch_without_steps_writes_nothing(probe_run: ProbeRun) -> None:
    proc, out = probe_run("no_steps.py")
    assert "SUM 3.0" in proc.stdout
    assert read_records(out) == []


def test_existing_sitecustomize_is_chained(probe_run: ProbeRun, tmp_path: Path) -> None:
    other = tmp_path / "site"
    other.mkdir()
    (other / "sitecustomize.py").write_text(
        "import os\nos.environ['CHAINED'] = 'yes'\nprint('CHAINED')\n"
    )
    out = tmp_path / "probe.jsonl"
    env = probe_run.env(out)
    env["PYTHONPATH"] = os.pathsep.join([str(probe_dir()), str(other)])
    code = "import os, sys; print('PROBE', '_portside_probe' in sys.modules, os.environ.get('CHAINED'))"
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["CHAINED", "PROBE True yes"]


def test_sigterm_leaves_records(probe_run: ProbeRun, tmp_path: Path) -> None:
    out = tmp_path / "probe.jsonl"
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPTS / "train_cpu.py"), "--steps", "100000", "--sleep", "0.02"],
        env=probe_run.env(out),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    printed = []
    assert proc.stdout is not None
    for line in proc.stdout:
        printed.append(line)
        if sum(x.startswith("GT ") for x in printed) == 5:
            break
    proc.send_signal(signal.SIGTERM)
    rest, _ = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGTERM  # the default behaviour survives the probe
    stdout = "".join(printed) + rest
    seen = len(ground_truth(stdout))
    records = read_records(out)
    # Buffered ones included (flush every 100 steps / 1 s): the steps still queued as plain
    # values at the signal are written as the records they stand for, values exact.
    assert len(steps_of(records)) >= 5
    assert len(steps_of(records)) in (seen, seen + 1)  # a step may end after its print
    assert_matches(stdout, [r for r in records if r["type"] != "step" or r["step"] < seen],
                   "clip")
    assert records[-1]["type"] == "exit" and records[-1]["reason"] == "signal:15"


def test_module_cli(tmp_path: Path) -> None:
    out = tmp_path / "cli.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PORTSIDE_")}
    cmd = [
        sys.executable,
        "-m",
        "portside.core.probe",
        "--out",
        str(out),
        "--",
        str(SCRIPTS / "train_cpu.py"),
        "--steps",
        "3",
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert_matches(proc.stdout, read_records(out), "clip")


@pytest.mark.slow  # a training run that spawns a worker process
def test_spawned_worker_writes_its_own_file(probe_run: ProbeRun, tmp_path: Path) -> None:
    proc, out = probe_run("spawn_train.py")
    pids = [int(line.split()[1]) for line in proc.stdout.splitlines() if line.startswith("TRAINED")]
    assert len(pids) == 2 and "EXIT 0 0" in proc.stdout
    parent, child = pids
    main = read_records(out)
    assert {r["pid"] for r in main} == {parent}
    assert len(steps_of(main)) == 2 and main[-1]["type"] == "exit"
    assert {r["rank"] for r in main} == {0}
    worker = read_records(tmp_path / f"probe.pid{child}.jsonl")
    assert len(steps_of(worker)) == 3 and {r["pid"] for r in worker} == {child}
    assert {r["rank"] for r in worker} == {None}  # a worker without a rank is not rank 0
    assert sorted(p.name for p in tmp_path.glob("probe*.jsonl")) == sorted(
        ["probe.jsonl", f"probe.pid{child}.jsonl"]
    )


def test_inject_env() -> None:
    env = inject_env(
        {"PYTHONPATH": "/a:/b", "PORTSIDE_PROBE_ROOT_PID": "1", "X": "y"}, "rel.jsonl", 3
    )
    assert env["PYTHONPATH"].split(os.pathsep) == [str(probe_dir()), "/a", "/b"]
    assert env["PORTSIDE_PROBE_OUT"] == os.path.abspath("rel.jsonl")
    assert env["PORTSIDE_SEED_OFFSET"] == "3" and env["X"] == "y"
    assert "PORTSIDE_PROBE_ROOT_PID" not in env
    assert (probe_dir() / "sitecustomize.py").is_file()
    assert inject_env(env, "o")["PYTHONPATH"].count(str(probe_dir())) == 1
