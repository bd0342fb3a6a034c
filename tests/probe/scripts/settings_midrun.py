"""SGD whose hyper-parameters the script changes by hand mid-run (--momentum-at N: momentum
0.9 -> 0.5 before step N; --wd-at N: weight decay 0 -> 1e-4); --swap-at N: an Adam optimizer
for the same parameters from step N. Prints what it set and where (GT)."""

import argparse
import json

import torch

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=60)
p.add_argument("--momentum-at", type=int, default=-1)
p.add_argument("--wd-at", type=int, default=-1)
p.add_argument("--swap-at", type=int, default=-1)
a = p.parse_args()
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
x, y = torch.randn(64, 4), torch.randn(64, 1)
opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
for i in range(a.steps):
    if i == a.momentum_at:
        for g in opt.param_groups:
            g["momentum"] = 0.5
    if i == a.wd_at:
        opt.param_groups[0]["weight_decay"] = 1e-4
    if i == a.swap_at:
        opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    opt.zero_grad()
    ((m(x) - y) ** 2).mean().backward()
    opt.step()
print("GT " + json.dumps({"steps": a.steps, "momentum_at": a.momentum_at, "wd_at": a.wd_at}))
