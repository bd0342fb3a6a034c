"""Corpus: per-step and metric-driven learning-rate schedules — OneCycleLR sized from
len(loader), linear warmup + cosine (LambdaLR), ReduceLROnPlateau on the validation loss —
with AdamW and an optional drop_last. Synthetic data."""

from __future__ import annotations

import argparse
import math

import torch
from _data import classification, evaluate  # beside this script: sys.path[0]
from torch import nn
from torch.optim import lr_scheduler
from torch.utils.data import DataLoader

p = argparse.ArgumentParser()
p.add_argument("--sched", choices=("onecycle", "cosine", "plateau"), required=True)
p.add_argument("--epochs", type=int, default=6)
p.add_argument("--batch", type=int, default=48)
p.add_argument("--lr", type=float, default=3e-3)
p.add_argument("--warmup", type=int, default=20, help="cosine: warmup steps (0: none)")
p.add_argument("--factor", type=float, default=0.5, help="plateau: reduction factor")
p.add_argument("--drop-last", action="store_true")
a = p.parse_args()

torch.set_num_threads(1)
torch.manual_seed(3)
train, val = classification(1000, 1), classification(500, 2)
loader = DataLoader(train, batch_size=a.batch, shuffle=True, drop_last=a.drop_last)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 10))
opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01)
total = a.epochs * len(loader)
if a.sched == "onecycle":
    sched = lr_scheduler.OneCycleLR(opt, max_lr=a.lr, epochs=a.epochs, steps_per_epoch=len(loader))
elif a.sched == "cosine":
    def factor(step: int) -> float:
        if step < a.warmup:
            return (step + 1) / a.warmup
        return 0.5 * (1 + math.cos(math.pi * (step - a.warmup) / max(1, total - a.warmup)))
    sched = lr_scheduler.LambdaLR(opt, factor)
else:  # always reduces: a threshold no epoch reaches keeps the decisions seed-independent
    sched = lr_scheduler.ReduceLROnPlateau(opt, factor=a.factor, patience=0, threshold=0.95)
for _epoch in range(a.epochs):
    model.train()
    for x, y in loader:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if a.sched != "plateau":
            sched.step()
    val_loss, acc = evaluate(model, val)
    if a.sched == "plateau":
        sched.step(val_loss)
print(f"accuracy {acc:.5f}")
