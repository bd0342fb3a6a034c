"""A hand-written update, no torch.optim optimizer; prints what it saw per step (GT lines)."""

import argparse

import torch

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=30)
p.add_argument("--clip", type=float, default=0.5)
p.add_argument("--clip-value", type=float, default=0.0)
a = p.parse_args()
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
x, y = torch.randn(64, 4), torch.randn(64, 1)
for i in range(a.steps):
    loss = ((m(x) - y) ** 2).mean()
    m.zero_grad()
    loss.backward()
    if a.clip_value:
        torch.nn.utils.clip_grad_value_(m.parameters(), a.clip_value)
        norm = torch.nan
    else:
        norm = torch.nn.utils.clip_grad_norm_(m.parameters(), a.clip).item()
    for q in m.parameters():
        q.data.add_(q.grad, alpha=-0.1)
    print("GT", i, loss.item(), norm)
with torch.no_grad():  # evaluation: no backward, no step
    print("EVAL", float(((m(x) - y) ** 2).mean()))
