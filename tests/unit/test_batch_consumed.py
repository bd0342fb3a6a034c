"""Issue 37: the global batch of runs with no DataLoader (the probe's `consumed`, the leading
dimension of the loss's input on the first steps), a DataLoader's `samples` preferred where
every run has it, the two never mixed; and the batch message under a warm-up from 0."""

from __future__ import annotations

from test_data_parallel import OK, ddp_run, judge, kinds

from portside.core.checks import RunRecords, global_batch


def indexed(world: int = 2, per_rank: int = 32, lr: float = 0.1, seed: int = 0,
            tokens: int = 1, loader: bool = False) -> list[dict]:
    """A run whose steps carry `consumed` (× `tokens`: a loss over batch × sequence rows) on
    the first 16 steps per rank, and `samples` only with `loader`."""
    out = ddp_run(world=world, per_rank=per_rank, lr=lr, seed=seed)
    for r in out:
        if r["type"] == "step":
            if not loader:
                del r["samples"]
            if r["step"] < 16:
                r["consumed"] = per_rank * tokens
    return out


def test_without_a_dataloader_the_batch_is_what_the_steps_consumed():
    b = global_batch(RunRecords.from_records(indexed(world=2, per_rank=32), OK), "consumed")
    assert b == {"global": 64.0, "world_size": 2, "per_rank": 32.0, "from": "consumed"}
    refs = [indexed(seed=s) for s in (0, 1, 2)]
    alarms = judge(indexed(world=1, per_rank=32, seed=5), refs)  # per-rank batch as global
    (a,) = [a for a in alarms if a.kind == "global-batch-changed"]
    assert a.is_error and a.evidence.batch_ratio == 0.5
    assert a.evidence.candidate_batch.from_ == "consumed"
    assert "global-batch-changed" not in kinds(judge(indexed(world=1, per_rank=64, seed=5),
                                                     refs), errors=False)


def test_dataloader_samples_preferred_and_never_mixed_with_consumed_rows():
    # Every run has a DataLoader: its samples decide, whatever the loss's rows are (tokens).
    refs = [indexed(seed=s, tokens=16, loader=True) for s in (0, 1, 2)]
    cand = indexed(world=1, per_rank=64, seed=5, tokens=8, loader=True)
    assert "global-batch-changed" not in kinds(judge(cand, refs), errors=False)
    # The reference's DataLoader, the candidate indexing: consumed against consumed.
    refs = [indexed(seed=s, loader=True) for s in (0, 1, 2)]
    alarms = judge(indexed(world=1, per_rank=32, seed=5), refs)
    (a,) = [a for a in alarms if a.kind == "global-batch-changed"]
    assert a.is_error and a.evidence.reference_batch.from_ == "consumed"


def test_batch_message_quotes_the_lr_past_a_warmup_from_zero():
    refs = [ddp_run(seed=s) for s in (0, 1, 2)]
    cand = ddp_run(world=1, per_rank=32, seed=5)
    for run in (*refs, cand):
        steps = [r for r in run if r["type"] == "step"]
        for r in steps[:4]:  # a linear warm-up from 0 over the first 2 steps of both ranks
            r["lr"] = [0.1 * (r["step"] / 2)]
    (a,) = [a for a in judge(cand, refs) if a.kind == "global-batch-changed"]
    assert "same learning rate 0.1 (peak, after a warm-up from 0)" in a.title, a.title
    assert a.evidence.lr == 0.1
