"""Gradient accumulation the way Lightning runs it: every micro-batch's forward and backward
in a closure; the first k-1 closures called directly, the last one by `optimizer.step(closure)`
(so its backward runs inside step()). No DataLoader: batches are indexed out of tensors. Prints
the step's loss (the sum of its micro-batch losses, each divided by k) as GT lines."""

from __future__ import annotations

import argparse

import torch
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=20)
p.add_argument("--accum", type=int, default=4)
p.add_argument("--batch", type=int, default=8, help="per micro-batch")
a = p.parse_args()

torch.manual_seed(0)
x, y = torch.randn(4096, 10), torch.randint(0, 3, (4096,))
model = nn.Linear(10, 3)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
i = 0
for step in range(a.steps):
    total = 0.0
    for k in range(a.accum):
        idx = torch.arange(i, i + a.batch)
        i += a.batch

        def closure(idx: torch.Tensor = idx) -> torch.Tensor:
            global total
            loss = nn.functional.cross_entropy(model(x[idx]), y[idx]) / a.accum
            loss.backward()
            total += loss.item()
            return loss

        if k < a.accum - 1:
            closure()
        else:
            opt.step(closure)
    opt.zero_grad()
    print("GT", step, repr(total))
