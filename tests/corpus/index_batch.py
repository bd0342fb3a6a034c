"""Corpus: research-style training with no DataLoader — the batch is taken by indexing tensors
(`x[idx]`), one process or under torchrun (each rank its slice of the global batch, gradients
reduced by DDP). The global batch is world size × --batch; plain SGD (momentum 0), where the
linear lr rule is close to exact. A port to one process must take --batch = world × the
reference's per-rank batch, or scale --lr with it (issue 37 item 3: taking the per-rank batch
as the global batch went unnamed when only DataLoaders were counted)."""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
from _data import classification, evaluate  # beside this script: sys.path[0]
from torch import nn
from torch.nn.parallel import DistributedDataParallel

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=5)
p.add_argument("--batch", type=int, default=32, help="per rank")
p.add_argument("--lr", type=float, default=0.2)
p.add_argument("--max-norm", type=float, default=1.0)
a = p.parse_args()

torch.set_num_threads(1)
world = int(os.environ.get("WORLD_SIZE", "1"))
if world > 1:
    dist.init_process_group("gloo")
rank = dist.get_rank() if world > 1 else 0
torch.manual_seed(4)  # the same initial weights on every rank
x, y = classification(1024, 1).tensors
val = classification(500, 2)
net = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 10))
model = DistributedDataParallel(net) if world > 1 else net
opt = torch.optim.SGD(model.parameters(), lr=a.lr)
gen = torch.Generator().manual_seed(int(torch.initial_seed()) % 2**31)  # from the global seed
glob = a.batch * world
for _epoch in range(a.epochs):
    perm = torch.randperm(len(x), generator=gen)
    for i in range(len(x) // glob):
        idx = perm[i * glob + rank * a.batch:i * glob + (rank + 1) * a.batch]
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), a.max_norm)
        opt.step()
_, acc = evaluate(net, val)
if world > 1:
    t = torch.tensor([acc])
    dist.all_reduce(t)
    acc = float(t) / world
    dist.destroy_process_group()
if rank == 0:
    print(f"accuracy {acc:.5f}")
