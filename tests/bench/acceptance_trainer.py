"""The trainer bench_acceptance.py runs: a small MLP on synthetic classification, SGD with
momentum and a DataLoader. --seed another seed (a correct port); planted small changes:
--label-noise (a data bug no setting shows), --weight-decay, --momentum. Prints accuracy."""

from __future__ import annotations

import argparse
import os
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

# Kept: the runs start this file as a script in a fresh interpreter, and the corpus's data
# (tests/corpus/_data.py) is not beside it.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "corpus"))
from _data import classification, evaluate  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--seed", type=int, default=1)
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--label-noise", type=float, default=0.0)
p.add_argument("--weight-decay", type=float, default=0.0)
p.add_argument("--momentum", type=float, default=0.9)
p.add_argument("--drop-last", action="store_true")
a = p.parse_args()

torch.set_num_threads(1)
torch.manual_seed(a.seed)
train, test = classification(1200, 1), classification(600, 2)
if a.label_noise:  # a share of the labels replaced, from the data's own generator
    x, y = train.tensors
    g = torch.Generator().manual_seed(5)
    flip = torch.rand(len(y), generator=g) < a.label_noise
    y = torch.where(flip, torch.randint(0, 10, (len(y),), generator=g), y)
    train = TensorDataset(x, y)
loader = DataLoader(train, batch_size=32, shuffle=True, drop_last=a.drop_last)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=a.momentum,
                      weight_decay=a.weight_decay)
for _ in range(a.epochs):
    model.train()
    for x, y in loader:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
print(f"accuracy {evaluate(model, test)[1]:.5f}")
