"""A development script for the drift rule (bench_drift_heldout.py --dev), shaped like the
issue 37 report's: a plain classifier, SGD with momentum, StepLR, gradient clipping, the data
order from the global seed. Gradient norms under SGD + momentum spike; the rule is tuned here
and measured on pytorch/examples. --label-noise: a planted change no setting shows."""

from __future__ import annotations

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--seed", type=int, default=1)
p.add_argument("--epochs", type=int, default=4)
p.add_argument("--label-noise", type=float, default=0.0)
a = p.parse_args()

torch.set_num_threads(1)
torch.manual_seed(a.seed)
gen = torch.Generator().manual_seed(1234)  # the data is fixed; only init and order follow the seed
w = torch.randn(32, 10, generator=gen)
x = torch.randn(1776, 32, generator=gen)
y = (x @ w + 1.5 * torch.randn(1776, 10, generator=gen)).argmax(1)
if a.label_noise:
    flip = torch.rand(1776, generator=gen) < a.label_noise
    y[flip] = torch.randint(0, 10, (int(flip.sum()),), generator=gen)
loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
for _epoch in range(a.epochs):
    for xb, yb in loader:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    sched.step()
with torch.no_grad():
    acc = (model(x).argmax(1) == y).float().mean().item()
print(f"accuracy {acc:.4f}")
