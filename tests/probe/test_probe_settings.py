"""The probe's settings facts (issue 26): every optimizer's class and hyper-parameters per
param group with the script's names for it, the training DataLoader, the precision — equal to
what the script set up (it prints that), read once, not per step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from portside.core.checks import Comparison, RunRecords, check_optimizer
from portside.core.log.criteria import parse_criteria
from portside.core.probe._probe import WATCH_EVERY

from ._util import ProbeRun, ground_truth, read_records, steps_of


def test_settings_facts_match_what_the_script_set(probe_run: ProbeRun) -> None:
    proc, out = probe_run("settings_train.py")
    gt = json.loads(proc.stdout.split("GT ", 1)[1])
    records = read_records(out)
    assert len(steps_of(records)) == gt["steps"]
    facts = [r for r in records if r["type"] == "facts"]
    last = facts[-1]
    d, g = last["optimizers"]  # in the order they first stepped: the discriminator first
    assert (d["class"], d["name"], d["modules"]) == ("SGD", "opt_d", ["disc"])
    assert (g["class"], g["name"], g["modules"]) == ("Adam", "opt_g", ["gen"])
    for o, want in ((d, gt["opt_d"]), (g, gt["opt_g"])):
        (group,) = o["groups"]
        assert {k: group["settings"][k] for k in want} == want
        assert "lr" not in group["settings"]  # the lr has its own schedule check
    assert d["signature"] != g["signature"] and d["params"] == 4 and g["params"] == 2
    data = last["data"]
    assert (data["batch_size"], data["shuffle"], data["drop_last"]) == (gt["batch"], False, True)
    assert (data["sampler"], data["dataset_len"], data["num_workers"]) == (
        "SequentialSampler", gt["data_len"], 0)
    prec = last["precision"]
    assert prec["autocast"] == ["cpu:torch.bfloat16"] and prec["param_dtypes"] == ["torch.float32"]
    assert prec["default_dtype"] == "torch.float32" and prec["grad_scaler"] is False
    # Read once per optimizer / iterator / new mode: the first step, the second optimizer;
    # three epochs of new iterators of the same loader add no record.
    assert len(facts) == 2, [sorted(f) for f in facts]


def test_hand_written_update_facts_have_the_loss_device(probe_run: ProbeRun) -> None:
    proc, out = probe_run("manual_update.py")
    (facts,) = [r for r in read_records(out) if r["type"] == "facts"]
    assert facts["param_devices"] == ["cpu"] and facts["loss_device"] == "cpu"
    assert facts["optimizers"] == [] and facts["backend"] == "cpu"
    assert ground_truth(proc.stdout)


def _optimizer_alarms(ref: Path, cand: Path) -> list:
    crit = parse_criteria("", "test")
    refs = [RunRecords.from_records(read_records(ref))]
    cand_records = RunRecords.from_records(read_records(cand))
    return check_optimizer(Comparison(refs, cand_records, final=True), crit)


@pytest.mark.slow  # a real run whose settings change mid-run
def test_a_setting_changed_mid_run_is_seen_and_named_with_its_step(probe_run: ProbeRun,
                                                                   tmp_path: Path) -> None:
    # The script sets momentum 0.9 -> 0.5 before step 23 and adds weight decay before step 41;
    # the probe re-reads the settings every WATCH_EVERY steps (not every step).
    _, ref = probe_run("settings_midrun.py", out=tmp_path / "ref.jsonl")
    proc, cand = probe_run("settings_midrun.py", "--momentum-at", "23", "--wd-at", "41",
                           out=tmp_path / "cand.jsonl")
    facts = [r for r in read_records(cand) if r["type"] == "facts"]
    (opt,) = facts[-1]["optimizers"]
    assert opt["groups"][0]["settings"]["momentum"] == 0.9  # as it first stepped
    mom, wd = opt["changes"]
    assert (mom["setting"], mom["from"], mom["to"], mom["group"]) == ("momentum", 0.9, 0.5, 0)
    assert mom["since"] < 23 <= mom["step"] < 23 + WATCH_EVERY
    assert (wd["setting"], wd["from"], wd["to"]) == ("weight_decay", 0, 1e-4)
    assert wd["since"] < 41 <= wd["step"] < 41 + WATCH_EVERY
    assert len(facts) == 3  # the first step's, one per change seen: not a record per step
    assert len(steps_of(read_records(cand))) == json.loads(proc.stdout.split("GT ", 1)[1])["steps"]

    (a,) = _optimizer_alarms(ref, cand)
    assert a.kind == "optimizer-changed" and a.is_error
    assert f"momentum from step {mom['step']} 0.5 vs reference 0.9" in a.title, a.title
    assert "weight_decay from step" in a.title
    first = a.evidence.changes[0]
    assert (first.candidate, first.reference, first.from_) == (0.5, 0.9, 0.9)
    # The same change in the references (the run is deterministic): the script does it.
    assert _optimizer_alarms(cand, cand) == []
    # A reference that changes it and a candidate that does not: named the same way.
    (b,) = _optimizer_alarms(cand, ref)
    assert f"momentum from step {mom['step']} 0.9 vs reference 0.5" in b.title, b.title


@pytest.mark.slow  # a real run whose optimizer is swapped mid-run
def test_an_optimizer_swapped_mid_run_is_named_with_its_step(probe_run: ProbeRun,
                                                             tmp_path: Path) -> None:
    _, ref = probe_run("settings_midrun.py", "--steps", "40", out=tmp_path / "ref.jsonl")
    _, cand = probe_run("settings_midrun.py", "--steps", "40", "--swap-at", "30",
                        out=tmp_path / "cand.jsonl")
    sgd, adam = [r for r in read_records(cand) if r["type"] == "facts"][-1]["optimizers"]
    assert (sgd["class"], sgd["first_step"], adam["class"], adam["first_step"]) == (
        "SGD", 0, "Adam", 30)
    (a,) = _optimizer_alarms(ref, cand)
    assert a.kind == "optimizer-changed" and "m SGD, m Adam from step 30" in a.title, a.title
