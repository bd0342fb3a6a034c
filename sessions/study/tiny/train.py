"""A tiny training script for portside's example study: a small MLP on fixed synthetic data.

The reference is `python train.py`; each "port" in ../manifest.toml is this script with the
change a port might make: none (correct), a gradient-clipping threshold or the LR schedule
changed (silently wrong: exit 0, the numbers differ), or a crash part-way.

Prints `step=<i> loss=<float>` per optimizer step and `accuracy=<percent>` at the end.
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--max-norm", type=float, default=1.0)
    p.add_argument("--no-scheduler", action="store_true")
    p.add_argument("--raise-at", type=int, default=-1)
    p.add_argument("--log-every", type=int, default=1)
    args = p.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(1234)  # the data never depend on the seed
    x = torch.randn(2048, 8, generator=gen)
    y = ((x[:, 0] > 0) ^ (x[:, 1] > 0)).long() + 2 * (x[:, 2] > 0).long()
    x_test, y_test = x[1536:], y[1536:]
    x, y = x[:1536], y[:1536]

    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    sched = None if args.no_scheduler else torch.optim.lr_scheduler.CosineAnnealingLR(
        opt, T_max=args.steps, eta_min=0.01 * args.lr)
    order = torch.randperm(len(x))
    for step in range(args.steps):
        if step == args.raise_at:
            raise RuntimeError(f"XLA device lost at step {step}")
        idx = order[(step * 64) % len(x):(step * 64) % len(x) + 64]
        opt.zero_grad()
        loss = F.cross_entropy(model(x[idx]), y[idx])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=args.max_norm)
        opt.step()
        if sched is not None:
            sched.step()
        if step % args.log_every == 0:
            print(f"step={step} loss={loss.item():.6f}", flush=True)
    with torch.no_grad():
        acc = (model(x_test).argmax(1) == y_test).float().mean().item()
    print(f"accuracy={100 * acc:.2f}", flush=True)


if __name__ == "__main__":
    main()
