"""Corpus: the torch_xla SPMD port of ddp.py (torchrun, gloo, 4 ranks × 32), as current TPU
code is written — one process driving every XLA device (`CPU_NUM_DEVICES=4 PJRT_DEVICE=CPU`
here), an `xs.Mesh` over them, the global batch sharded along the mesh's data axis with
`xs.mark_sharding`; XLA's partitioner splits the step and all-reduces the gradients.

The global batch of step i is the four ranks' i-th batches side by side (the same
DistributedSamplers as the reference), so the mean loss over 128 is the reference's average
of four means over 32: the same gradients, then the same clipping and SGD step.
Planted: --no-shard (the batch is never sharded: every tensor replicated, so each device
computes the whole step and the "four-chip" port does one chip's work)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import numpy as np
import torch
import torch_xla
import torch_xla.distributed.spmd as xs
import torch_xla.runtime as xr
from _data import classification, evaluate  # beside this script: sys.path[0]
from torch import nn
from torch.utils.data import DataLoader, Sampler
from torch.utils.data.distributed import DistributedSampler


class GlobalBatches(Sampler[list[int]]):
    """The batches of `world` DistributedSamplers (per-rank batch `per_rank`), concatenated."""

    def __init__(self, data: object, world: int, per_rank: int) -> None:
        self.samplers = [DistributedSampler(data, num_replicas=world, rank=r, shuffle=True,
                                            seed=0) for r in range(world)]
        self.per_rank = per_rank
        self.sampler = self.samplers[0]  # as torch's BatchSampler shows what it draws from

    def set_epoch(self, epoch: int) -> None:
        for s in self.samplers:
            s.set_epoch(epoch)

    def __len__(self) -> int:
        return len(self.samplers[0]) // self.per_rank

    def __iter__(self) -> Iterator[list[int]]:
        idx = [list(s) for s in self.samplers]
        b = self.per_rank
        for i in range(len(self)):
            yield [j for r in idx for j in r[i * b:(i + 1) * b]]


p = argparse.ArgumentParser()
p.add_argument("--no-shard", action="store_true")
p.add_argument("--epochs", type=int, default=5)
p.add_argument("--batch", type=int, default=32, help="per reference rank (the shard)")
p.add_argument("--world", type=int, default=4, help="the reference's ranks")
p.add_argument("--max-norm", type=float, default=1.0)
p.add_argument("--lr", type=float, default=0.1)
a = p.parse_args()

torch.set_num_threads(1)
xr.use_spmd()
n = xr.global_runtime_device_count()
mesh = xs.Mesh(np.arange(n), (n,), ("data",))
device = torch_xla.device()
torch.manual_seed(4)
train, val = classification(1024, 1), classification(500, 2)
batches = GlobalBatches(train, a.world, a.batch)
loader = DataLoader(train, batch_sampler=batches)
net = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 10))
model = net.to(device)  # parameters replicated: data parallelism
opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
for epoch in range(a.epochs):
    batches.set_epoch(epoch)
    model.train()
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        if not a.no_shard:
            xs.mark_sharding(x, mesh, ("data", None))
            xs.mark_sharding(y, mesh, ("data",))
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), a.max_norm)
        opt.step()
        torch_xla.sync()
cpu = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 10))
cpu.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
_, acc = evaluate(cpu, val)
print(f"accuracy {acc:.5f}", flush=True)
