"""Planted differences between two CPU runs of a small training script, each localised to the
place that was changed (the ground truth is the flag the candidate was given)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from cli_run import clean_env, cli

from ._util import command, trace_all

pytestmark = pytest.mark.slow  # two dozen short training runs

REFERENCE = "--threads 2"
CASES = {
    # name: (candidate flags, kind, name)
    "label_smoothing": ("--label-smoothing 0.1", "loss", None),
    "normalisation": ("--norm-mean 0.45", "input", "args"),
    "dropout": ("--dropout 0.1", "module", "encoder.2"),
    "activation": ("--act gelu", "module", "encoder.1"),
    "layer": ("--no-bias3", "module", "encoder.3"),
    "clip": ("--max-norm 0.05", "clip", "encoder.0.weight"),
    "lr": ("--lr 0.1", "update", "encoder.0.weight"),
    "weight_decay": ("--wd 0.01", "update", "encoder.0.weight"),
    "bf16": ("--bf16", "module", "encoder.0"),
    "threads": ("--threads 1", "none", None),
    "other_init": ("--init-seed 7", "none", None),
}


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("localize")
    return trace_all(tmp, command(REFERENCE),
                     {name: command(flags) for name, (flags, _, _) in CASES.items()})


@pytest.mark.parametrize("case", list(CASES))
def test_planted_case_is_localised(results: dict, case: str) -> None:
    _, kind, name = CASES[case]
    d = results[case]["divergence"]
    assert (d["kind"], d["name"]) == (kind, name), d
    if kind != "none":
        assert d["step"] == 0
        assert d["reference"] != d["candidate"]
    assert results[case]["steps_compared"] == 2


def test_clip_means_gradients_equal_and_clipped_differ(results: dict) -> None:
    # "clip" is only right if every gradient before clipping agreed: check the trace itself.
    assert results["clip"]["divergence"]["reason"].startswith("norm")
    assert results["clip"]["events_compared"] > 20


def test_other_initial_weights_are_aligned_by_name(results: dict) -> None:
    w = results["other_init"]["weights"]
    assert not w["same_start"]  # the candidate really started elsewhere
    al = w["alignment"]
    assert al["aligned"] and al["matched_by"] == "name"
    assert len(al["differed"]) == 6 and al["loaded"] == 6
    assert w["aligned_checksum"] == w["reference_checksum"]
    # Without a different init nothing was replaced.
    assert results["threads"]["weights"]["alignment"]["differed"] == []


def test_changed_layer_is_reported_as_one_sided(results: dict) -> None:
    r = results["layer"]
    assert r["only_reference"]["params"] == ["encoder.3.bias"]
    assert r["only_candidate"] == {"modules": [], "params": []}


def test_runs_stop_after_the_traced_steps(results: dict) -> None:
    # The script trains 20 steps and prints STEPS_DONE at its end: trace mode ended it at 2.
    run = results["threads"]["run"]
    assert run.exit_code == 0
    assert not any("STEPS_DONE" in line for line in run.tail)
    steps = [r for r in run.records if r.get("type") == "step"]
    assert len(steps) == 2  # the probe's records were written before the early exit
    assert any(r.get("type") == "exit" for r in run.records)


def test_cli_json(tmp_path: Path) -> None:
    proc = cli("localize", "--reference", command(REFERENCE),
               "--candidate", command("--label-smoothing 0.1"), "--steps", "1", "--json",
               "--keep", str(tmp_path / "w"), env=clean_env(), timeout=600)
    assert proc.returncode == 1, proc.stderr
    out = json.loads(proc.stdout)
    assert out["divergence"]["kind"] == "loss" and out["divergence"]["step"] == 0
    assert out["steps_compared"] == 1
    assert [r["role"] for r in out["runs"]] == ["reference", "candidate"]
    assert (tmp_path / "w" / "reference.trace.jsonl").exists()


def test_cli_reports_a_run_that_cannot_trace(tmp_path: Path) -> None:
    proc = cli("localize", "--reference", command(REFERENCE),
               "--candidate", f"{sys.executable} -c 'import sys; sys.exit(3)'", "--json",
               env=clean_env(), timeout=600)
    assert proc.returncode == 2, proc.stderr
    out = json.loads(proc.stdout)
    assert out["divergence"] is None
    assert "candidate run recorded no trace" in out["error"]


def test_candidate_that_crashes_is_localised_as_far_as_it_got(tmp_path: Path) -> None:
    crash = Path(__file__).parent / "scripts" / "crash_in_backward.py"
    proc = cli("localize", "--reference", command(REFERENCE),
               "--candidate", f"{sys.executable} {crash} --act gelu", "--json",
               env=clean_env(), timeout=600)
    assert proc.returncode == 1, proc.stderr
    out = json.loads(proc.stdout)
    d = out["divergence"]
    assert (d["kind"], d["name"], d["step"]) == ("module", "encoder.1", 0)
    assert any("planted crash in backward" in n for n in out["notes"])
