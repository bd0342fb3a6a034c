"""The corpus through the real verification path (probe, runner, Verifier, checks): every
correct port passes against three reference seeds, every planted failure is flagged with the
alarm kind that names its cause. 60 short runs, two at a time (a few minutes); the XLA:CPU
cases are test_corpus_xla.py's."""

from __future__ import annotations

import pytest

from .harness import Row, run, table

# The first test pays for the module's runs (its fixture): a bound for the whole corpus.
pytestmark = pytest.mark.timeout(3600)


@pytest.fixture(scope="module")
def rows() -> list[Row]:
    out, _ = run(parallel=2, xla=False)
    print("\n" + table(out))
    return out


@pytest.mark.slow
def test_correct_ports_pass_and_planted_failures_name_their_cause(rows: list[Row]) -> None:
    bad = [r for r in rows if not r.ok]
    assert not bad, "\n" + table(bad) + "\n" + "\n".join(t for r in bad for t in r.titles)
    assert sum(r.expected == "pass" for r in rows) >= 14
    assert sum(r.expected != "pass" for r in rows) >= 23


@pytest.mark.slow
def test_weight_decay_is_named_as_the_optimizer_not_clipping(rows: list[Row]) -> None:
    (wd,) = [r for r in rows if r.candidate == "weight decay added"]
    assert "optimizer-changed" in wd.errors
    assert not any(a.endswith(":clipping-changed") for a in wd.alarms)


# Issue 26: the settings facts name the cause with both values (from the scripts' flags).
SETTINGS_ROWS = {
    ("steplr", "weight decay added"): ("optimizer-changed", "weight_decay 0.05 vs reference 0"),
    ("steplr", "shuffle off"): ("data-changed", "shuffle sequential vs reference shuffled"),
    ("steplr", "bf16 autocast"): ("precision-changed", "autocast (bfloat16) vs reference (off)"),
    ("accumulation", "momentum 0.5"): ("optimizer-changed", "momentum 0.5 vs reference 0.9"),
    ("lbfgs", "history_size 5"): ("optimizer-changed", "history_size 5 vs reference 10"),
    ("gan", "generator betas default"):
        ("optimizer-changed", "netG: Adam betas (0.9, 0.999) vs reference (0.5, 0.999)"),
    ("gan", "discriminator weight decay"):
        ("optimizer-changed", "netD: Adam weight_decay 0.01 vs reference 0"),
}


@pytest.mark.slow
def test_settings_changes_name_their_kind_with_both_values(rows: list[Row]) -> None:
    by = {(r.case, r.candidate): r for r in rows}
    for row, (kind, text) in SETTINGS_ROWS.items():
        r = by[row]
        assert any(t.startswith(f"[error] {kind}: ") and text in t for t in r.titles), r.titles
    swapped = by["gan", "optimizers made the other way round"]
    assert not any("optimizer-changed" in a for a in swapped.alarms), swapped.titles
    # the fp16 + GradScaler -> bf16 port is allowed by default: info, not an error
    bf16 = by["amp-scaler", "bf16, no scaler"]
    assert "info:precision-changed" in bf16.alarms and not bf16.errors


@pytest.mark.slow
def test_uniform_step_difference_is_info(rows: list[Row]) -> None:
    (dl,) = [r for r in rows if (r.case, r.candidate) == ("steplr", "drop_last")]
    assert dl.steps < min(dl.reference_steps) and "info:step-count-differs" in dl.alarms


@pytest.mark.slow
def test_data_parallel_faults_name_their_cause(rows: list[Row]) -> None:
    by = {(r.case, r.candidate): r for r in rows}
    for label in ("gradients summed", "loss x world size"):
        assert "rank-averaging-changed" in by["ddp-torchrun", label].errors
    assert "rank-averaging-changed" not in by["ddp-torchrun", "all_reduce, then clip"].alarms
    for label in ("1 rank x 32, same lr", "2 ranks x 64, same lr"):
        assert "global-batch-changed" in by["ddp-batch", label].errors
    for label in ("1 rank x 32, lr halved", "2 ranks x 64, lr doubled"):
        r = by["ddp-batch", label]
        assert not r.errors and "info:global-batch-changed" in r.alarms
