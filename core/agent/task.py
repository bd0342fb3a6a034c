"""The task an agent that works on its own (Claude Code, Codex) is sent when the user gives none:
the port, what must not change, and that portside will check it."""

from __future__ import annotations


def default_task(target: str) -> str:
    """The task prompt `portside run --agent claude-code` (or `codex`) sends when none is given."""
    return (
        f"Port this PyTorch training project to `{target}` (torch_xla; TorchTPU where the target "
        "is a TPU and it is installed) so that it runs there and trains the same model the same "
        "way. Preserve the numerics: same model, data order and seeds, optimizer and "
        "hyper-parameters, learning-rate schedule, gradient clipping (max_norm and where it is "
        "applied), loss scaling and precision (no silent bf16/fp16 change), and the same number "
        "of steps; only device placement, the step/compile boundaries (e.g. "
        "xm.optimizer_step / torch_xla.sync) and data loading for the device may change. Keep "
        "the command line the same. Every edit and command you make is reviewed. When you stop, "
        "portside runs the reference and your version and compares loss, gradient norms, "
        "clipping and the learning rate step by step; say plainly what you changed and what you "
        "could not verify."
    )


__all__ = ["default_task"]
