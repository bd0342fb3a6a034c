"""The probe's settings facts (issue 26): every optimizer's class and hyper-parameters per
param group with the script's names for it, the training DataLoader, the precision — equal to
what the script set up (it prints that), read once, not per step."""

from __future__ import annotations

import json

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
