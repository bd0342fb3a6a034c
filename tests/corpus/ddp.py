"""Corpus: data-parallel training under torchrun with the gloo backend on the CPU.

--mode ddp: DistributedDataParallel (gradients reduced inside backward), then clipping.
--mode allreduce: a hand-written all-reduce of the gradients, then clipping (a correct port).
Planted: --clip-before (clip each rank's own gradients, then reduce), --mode noreduce (the
gradients are never reduced: every rank trains its own model), --no-average (the hand-written
all_reduce sums the gradients and never divides by the world size), --loss-times-world (DDP
with the loss multiplied by the world size, "to sum the ranks' losses"). The global batch is
world size × --batch: another world size or --batch needs the --lr that goes with it."""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
from _data import classification, evaluate  # beside this script: sys.path[0]
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

p = argparse.ArgumentParser()
p.add_argument("--mode", choices=("ddp", "allreduce", "noreduce"), default="ddp")
p.add_argument("--clip-before", action="store_true")
p.add_argument("--epochs", type=int, default=5)
p.add_argument("--batch", type=int, default=32, help="per rank")
p.add_argument("--max-norm", type=float, default=1.0)
p.add_argument("--lr", type=float, default=0.1)
p.add_argument("--momentum", type=float, default=0.9)
p.add_argument("--no-average", action="store_true")
p.add_argument("--loss-times-world", action="store_true")
a = p.parse_args()

torch.set_num_threads(1)
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(4)  # the same initial weights on every rank
train, val = classification(1024, 1), classification(500, 2)
sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=0)
loader = DataLoader(train, batch_size=a.batch, sampler=sampler)
net = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 10))
model = DistributedDataParallel(net) if a.mode == "ddp" else net
opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
params = list(model.parameters())
for epoch in range(a.epochs):
    sampler.set_epoch(epoch)
    model.train()
    for x, y in loader:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        if a.loss_times_world:
            loss = loss * world
        loss.backward()
        if a.clip_before:
            nn.utils.clip_grad_norm_(params, a.max_norm)
        if a.mode == "allreduce":
            for q in params:
                dist.all_reduce(q.grad)
                if not a.no_average:
                    q.grad /= world
        if not a.clip_before:
            nn.utils.clip_grad_norm_(params, a.max_norm)
        opt.step()
_, acc = evaluate(net, val)
t = torch.tensor([acc])
dist.all_reduce(t)
if rank == 0:
    print(f"accuracy {float(t) / world:.5f}")
dist.destroy_process_group()
