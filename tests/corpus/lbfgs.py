"""Corpus: full-batch LBFGS with a closure (several backward passes per optimizer step), a
small regression in the style of the time-sequence-prediction example."""

from __future__ import annotations

import argparse

import torch
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=40)
p.add_argument("--lr", type=float, default=0.8)
p.add_argument("--max-iter", type=int, default=4)
p.add_argument("--seed", type=int, default=2)
p.add_argument("--history", type=int, default=10)
a = p.parse_args()

torch.set_num_threads(1)
torch.manual_seed(a.seed)
gen = torch.Generator().manual_seed(9)
x = torch.rand(400, 1, generator=gen) * 6 - 3
y = torch.sin(x) + 0.05 * torch.randn(400, 1, generator=gen)
model = nn.Sequential(nn.Linear(1, 24), nn.Tanh(), nn.Linear(24, 1))
opt = torch.optim.LBFGS(model.parameters(), lr=a.lr, max_iter=a.max_iter, history_size=a.history)
closures = 0
for _step in range(a.steps):
    def closure() -> torch.Tensor:
        global closures
        closures += 1
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss
    loss = opt.step(closure)
print(f"CLOSURES {closures}")
with torch.no_grad():
    print(f"final_loss {float(nn.functional.mse_loss(model(x), y)):.6f}")
