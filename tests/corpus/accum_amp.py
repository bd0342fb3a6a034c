"""Corpus: gradient accumulation and mixed precision: fp16 autocast with a GradScaler, whose
first steps overflow and are skipped (init_scale 2**24), and a TPU-style bf16 port without a
scaler that skips none. Synthetic data."""

from __future__ import annotations

import argparse

import torch
from _data import classification, evaluate  # beside this script: sys.path[0]
from torch import nn
from torch.utils.data import DataLoader

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=5)
p.add_argument("--batch", type=int, default=8, help="micro-batch")
p.add_argument("--accum", type=int, default=4)
p.add_argument("--lr", type=float, default=0.05)
p.add_argument("--max-norm", type=float, default=2.0)
p.add_argument("--momentum", type=float, default=0.9)
p.add_argument("--scaler", action="store_true")
p.add_argument("--dtype", choices=("float16", "bfloat16"), default="bfloat16")
p.add_argument("--init-scale", type=float, default=2.0**16)
p.add_argument("--no-divide", action="store_true", help="planted: loss not divided by accum")
p.add_argument("--clip-micro", action="store_true", help="planted: clip every micro-batch")
p.add_argument("--no-unscale", action="store_true", help="planted: clip the scaled gradients")
p.add_argument("--gt", action="store_true", help="print each step's loss sum and the skips")
a = p.parse_args()

torch.set_num_threads(1)
torch.manual_seed(5)
train, val = classification(960, 1), classification(500, 2)
loader = DataLoader(train, batch_size=a.batch, shuffle=True, drop_last=True)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 10))
opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
scaler = torch.amp.GradScaler("cpu", init_scale=a.init_scale) if a.scaler else None
params = list(model.parameters())
step_loss, skips = 0.0, 0
for _epoch in range(a.epochs):
    model.train()
    for i, (x, y) in enumerate(loader):
        with torch.autocast("cpu", dtype=getattr(torch, a.dtype)):
            out = model(x)
        loss = nn.functional.cross_entropy(out.float(), y)
        if not a.no_divide:
            loss = loss / a.accum
        (scaler.scale(loss) if scaler else loss).backward()
        step_loss += loss.item()
        if a.clip_micro:
            nn.utils.clip_grad_norm_(params, a.max_norm)
        if (i + 1) % a.accum:
            continue
        if scaler:
            if not a.no_unscale:
                scaler.unscale_(opt)
            if not a.clip_micro:
                nn.utils.clip_grad_norm_(params, a.max_norm)
            scaler.step(opt)
            before = scaler.get_scale()
            scaler.update()
            skipped = scaler.get_scale() < before  # the scale backs off only after a skip
            skips += skipped
            if a.gt and not skipped:
                print("GT", repr(step_loss))
        else:
            if not a.clip_micro:
                nn.utils.clip_grad_norm_(params, a.max_norm)
            opt.step()
            if a.gt:
                print("GT", repr(step_loss))
        step_loss = 0.0
        opt.zero_grad()
    val_loss, acc = evaluate(model, val)
print(f"accuracy {acc:.5f}")
if a.gt:
    print("SKIPS", skips)
