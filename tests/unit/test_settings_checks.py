"""optimizer-changed, data-changed, precision-changed (issue 26) on facts records shaped as
the probe writes them (FORMAT.md; tests/probe/test_probe_settings.py checks the probe's side):
the cause named with both values, optimizers matched by what they train, allowed changes as
info, torch-version differences and settings the references disagree on left alone."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from portside.core.checks import Comparison, RunRecords, run_checks
from portside.core.checks.data import check_data
from portside.core.checks.optimizer import check_optimizer
from portside.core.checks.precision import check_precision
from portside.core.checks.settings import settings_summary
from portside.core.log.criteria import CriteriaError, parse_criteria
from portside.core.log.events import AlarmRaised
from portside.tui.model import AlarmView
from portside.tui.widgets.checks import evidence_text

DEFAULT = parse_criteria("")


def adam(name: str, module: str, sig: str, index: int, **settings: Any) -> dict[str, Any]:
    s = {"amsgrad": False, "betas": [0.5, 0.999], "eps": 1e-08, "maximize": False,
         "weight_decay": 0, "decoupled_weight_decay": False, **settings}
    return {"index": index, "class": "Adam", "name": name, "modules": [module], "params": 4,
            "numel": 50, "signature": sig,
            "groups": [{"settings": s, "params": 4, "numel": 50, "modules": [module]}]}


DATA = {"batch_size": 32, "shuffle": True, "sampler": "RandomSampler",
        "batch_sampler": "BatchSampler", "drop_last": False, "num_workers": 0,
        "pin_memory": False, "dataset": "TensorDataset", "dataset_len": 960}
PRECISION = {"param_dtypes": ["torch.float32"], "autocast": [], "default_dtype": "torch.float32",
             "matmul_precision": "highest", "env": {}, "grad_scaler": False}


def facts(optimizers: list[dict[str, Any]] | None = None, data: dict[str, Any] | None = None,
          precision: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"type": "facts", "backend": "cpu", "device_kind": "CPU", "world_size": 1,
            "optimizers": optimizers if optimizers is not None else
            [adam("optD", "netD", "d" * 12, 0), adam("optG", "netG", "g" * 12, 1)],
            "data": copy.deepcopy(DATA) if data is None else data,
            "precision": copy.deepcopy(PRECISION) if precision is None else precision}


def run(f: dict[str, Any], name: str = "run") -> RunRecords:
    return RunRecords.from_arrays(loss=[1.0, 0.9, 0.8], lr=[1e-3] * 3, facts=f, name=name)


def refs(n: int = 3) -> list[RunRecords]:
    return [run(facts(), f"ref{i}") for i in range(n)]


def test_gan_generator_betas_named_with_both_values_whatever_the_order() -> None:
    # The candidate made the generator's optimizer first: matched by what it trains.
    cand = run(facts([adam("optG", "netG", "g" * 12, 0, betas=[0.9, 0.999]),
                      adam("optD", "netD", "d" * 12, 1)]))
    (a,) = check_optimizer(Comparison(refs(), cand, final=True), DEFAULT)
    assert a.kind == "optimizer-changed" and a.severity == "error"
    assert a.title == "netG: Adam betas (0.9, 0.999) vs reference (0.5, 0.999)"
    assert a.wire["changes"] == [{"setting": "betas", "candidate": [0.9, 0.999],
                                  "reference": [0.5, 0.999], "where": "Adam"}]


def test_same_optimizers_in_another_order_and_another_torch_are_no_change() -> None:
    older = [adam("optG", "netG", "g" * 12, 0), adam("optD", "netD", "d" * 12, 1)]
    for o in older:  # torch 2.9 (the torch_xla venv) has no decoupled_weight_decay key
        del o["groups"][0]["settings"]["decoupled_weight_decay"]
    assert check_optimizer(Comparison(refs(), run(facts(older)), final=True), DEFAULT) == []


@pytest.mark.parametrize("setting,value", [
    ("weight_decay", 0.01), ("eps", 1e-6), ("amsgrad", True), ("maximize", True)])
def test_each_hyper_parameter_is_a_fact(setting: str, value: Any) -> None:
    cand = facts()
    cand["optimizers"][0]["groups"][0]["settings"][setting] = value
    (a,) = check_optimizer(Comparison(refs(), run(cand), final=True), DEFAULT)
    assert a.evidence.changes[0].setting == setting
    assert a.evidence.changes[0].candidate == value and a.title.startswith("netD: ")


def test_optimizer_class_changed_and_allowed_settings_are_info() -> None:
    cand = facts()
    cand["optimizers"][1]["class"] = "SGD"
    (a,) = check_optimizer(Comparison(refs(), run(cand), final=True), DEFAULT)
    assert a.title == "netG: class SGD vs reference Adam" and a.is_error
    wd = facts()
    wd["optimizers"][0]["groups"][0]["settings"]["weight_decay"] = 0.1
    allow = parse_criteria('[settings]\nallow = ["optimizer.weight_decay"]')
    (b,) = check_optimizer(Comparison(refs(), run(wd), final=True), allow)
    assert b.severity == "info" and b.evidence.allowed is True


def test_a_setting_the_references_disagree_on_is_not_judged() -> None:
    rs = refs()
    rs[1].facts["optimizers"][0]["groups"][0]["settings"]["eps"] = 1e-7  # type: ignore[index]
    cand = facts()
    cand["optimizers"][0]["groups"][0]["settings"]["eps"] = 1e-6
    assert check_optimizer(Comparison(rs, run(cand), final=True), DEFAULT) == []


def test_a_live_run_before_its_second_optimizer_stepped_is_not_judged_on_the_count() -> None:
    # Seen on the live screen: the candidate's facts after the discriminator's first step hold
    # one optimizer; the generator's follows at its own first step.
    live = run(facts([adam("optD", "netD", "d" * 12, 0)]))
    assert check_optimizer(Comparison(refs(), live), DEFAULT) == []
    kinds = [a.kind for a in run_checks(refs(), live, DEFAULT, "cpu", final=False)]
    assert "optimizer-changed" not in kinds
    # ended with one: a change
    (a,) = check_optimizer(Comparison(refs(), live, final=True), DEFAULT)
    assert a.title == "optimizers (netD Adam) vs reference (netD Adam, netG Adam)"


def test_no_optimizer_on_either_side_is_no_alarm() -> None:
    assert check_optimizer(Comparison([run(facts([]))], run(facts([])), final=True), DEFAULT) == []


def test_data_shuffle_off_is_an_error_drop_last_is_allowed_batch_is_elsewhere() -> None:
    seq = dict(DATA, shuffle=False, sampler="SequentialSampler")
    (a,) = check_data(Comparison(refs(), run(facts(data=seq))), DEFAULT)
    assert a.is_error and a.title == ("training DataLoader: shuffle sequential vs reference "
                                      "shuffled")
    (b,) = check_data(Comparison(refs(),
                                 run(facts(data=dict(DATA, drop_last=True, num_workers=2)))),
                      DEFAULT)
    assert b.severity == "info" and {c.setting for c in b.evidence.changes} == {
        "drop_last", "num_workers"}
    # batch size: the global-batch check's; N ranks' DistributedSampler(shuffle) is the order
    dist = dict(DATA, batch_size=16, sampler="DistributedSampler", shuffle=True)
    assert check_data(Comparison(refs(), run(facts(data=dist))), DEFAULT) == []
    strict = parse_criteria("[settings]\nallow = []")
    (c,) = check_data(Comparison(refs(), run(facts(data=dict(DATA, drop_last=True)))), strict)
    assert c.is_error


def test_precision_silent_bf16_is_an_error_fp16_to_bf16_port_is_info() -> None:
    bf16 = dict(PRECISION, autocast=["cpu:torch.bfloat16"])
    (a,) = check_precision(Comparison(refs(), run(facts(precision=bf16))), DEFAULT)
    assert a.is_error and a.title == ("training precision: autocast (bfloat16) vs reference "
                                      "(off)")
    fp16 = [run(facts(precision=dict(PRECISION, autocast=["cuda:torch.float16"],
                                     grad_scaler=True)), f"r{i}") for i in range(2)]
    xla_bf16 = run(facts(precision=dict(bf16, autocast=["xla:torch.bfloat16"])))
    (b,) = check_precision(Comparison(fp16, xla_bf16), DEFAULT)
    assert b.severity == "info" and b.evidence.reference_grad_scaler is True
    env = dict(PRECISION, env={"XLA_USE_BF16": "1"})
    (c,) = check_precision(Comparison(refs(), run(facts(precision=env))), DEFAULT)
    assert c.is_error and c.evidence.changes[0].setting == "env"
    half = dict(PRECISION, param_dtypes=["torch.bfloat16"])
    (d,) = check_precision(Comparison(refs(), run(facts(precision=half))), DEFAULT)
    assert d.evidence.changes[0].candidate == ["bfloat16"]


def test_run_checks_names_the_setting_as_the_drift_cause() -> None:
    cand = facts()
    cand["optimizers"][0]["groups"][0]["settings"]["weight_decay"] = 0.1
    alarms = run_checks(refs(), run(cand), DEFAULT, "cpu", final=True)
    assert [a.kind for a in alarms if a.is_error] == ["optimizer-changed"]


def test_verify_json_and_checks_card_show_both_values() -> None:
    summary = settings_summary(facts())
    assert summary["optimizers"][1]["modules"] == ["netG"]
    assert summary["optimizers"][1]["groups"][0]["betas"] == [0.5, 0.999]
    assert summary["data"]["shuffle"] is True and summary["precision"]["autocast"] == []
    cand = run(facts([adam("optG", "netG", "g" * 12, 0, betas=[0.9, 0.999]),
                      adam("optD", "netD", "d" * 12, 1)]))
    (a,) = check_optimizer(Comparison(refs(), cand, final=True), DEFAULT)
    view = AlarmView(AlarmRaised(session_id="s", alarm_id="al-1", check=a.kind,
                                 severity="error", title=a.title, evidence=a.wire))
    text = evidence_text(view).plain
    assert "Adam betas\n    cand (0.9, 0.999)  ref (0.5, 0.999)" in text


def test_criteria_refuse_unknown_setting_groups_and_bad_alpha() -> None:
    with pytest.raises(CriteriaError, match=r"c.toml:2: settings.allow: 'optimiser.eps'"):
        parse_criteria('[settings]\nallow = ["optimiser.eps"]', "c.toml")
    with pytest.raises(CriteriaError, match=r"c.toml:2: acceptance.alpha: must be a number"):
        parse_criteria("[acceptance]\nalpha = 0.7", "c.toml")
    assert parse_criteria("[acceptance]\nalpha = 0.01").acceptance.alpha == 0.01


@pytest.mark.parametrize("kind,before,after", [
    ("optimizer-changed", "opt = Adam(p, betas=(0.5, 0.999))\n", "opt = Adam(p)\n"),
    ("data-changed", "loader = DataLoader(d, shuffle=True)\n",
     "loader = DataLoader(d, shuffle=False)\n"),
    ("precision-changed", "out = model(x)\n",
     "with torch.autocast('xla', dtype=torch.bfloat16):\n    out = model(x)\n"),
])
def test_each_settings_alarm_links_to_the_edit_with_the_matching_risk_mark(
        kind: str, before: str, after: str) -> None:
    from portside.core.log.events import EditProposed
    from portside.core.workspace.risk import linked_edits, risk_marks

    other = EditProposed(session_id="s", edit_id="e1", path="log.py", before="a = 1\n",
                         after="a = 2\n", risks=risk_marks("log.py", "a = 1\n", "a = 2\n"))
    edit = EditProposed(session_id="s", edit_id="e2", path="train.py", before=before,
                        after=after, risks=risk_marks("train.py", before, after))
    (linked, _mark), = linked_edits(kind, [other, edit], {"e1", "e2"})
    assert linked.edit_id == "e2"


def _changed(opt: dict[str, Any], *changes: tuple[int, str, Any, Any]) -> dict[str, Any]:
    return {**opt, "changes": [{"step": s, "since": s - 10, "group": 0, "setting": k,
                                "from": a, "to": b} for s, k, a, b in changes]}


def test_a_mid_run_change_is_compared_at_its_step_and_a_schedule_is_not() -> None:
    d = adam("optD", "netD", "d" * 12, 0)
    ref = run(facts([d]))
    hand = run(facts([_changed(d, (49, "betas", [0.5, 0.999], [0.9, 0.999]))]))
    (a,) = check_optimizer(Comparison([ref], hand, final=True), DEFAULT)
    assert a.is_error and "betas from step 49 (0.9, 0.999) vs reference (0.5, 0.999)" in a.title
    assert a.evidence.changes[0].from_ == [0.5, 0.999]
    # A momentum-like setting cycled by a scheduler on both sides, at steps one port's
    # shorter epochs shift: a schedule (the lr check's), not a hand edit.
    cycle = [(s, "betas", [0.5, 0.999], [0.5 + s / 1000, 0.999]) for s in (9, 19, 29, 39)]
    shifted = [(s + 1, k, a, b) for s, k, a, b in cycle]
    assert check_optimizer(Comparison([run(facts([_changed(d, *cycle)]))],
                                      run(facts([_changed(d, *shifted)])), final=True),
                           DEFAULT) == []
    # Scheduled on one side only: the scheduler's doing (the lr check's), not compared here.
    assert check_optimizer(Comparison([ref], run(facts([_changed(d, *shifted)])), final=True),
                           DEFAULT) == []
