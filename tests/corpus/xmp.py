"""Corpus: the torch_xla port of ddp.py in the `xmp.spawn` style of torch_xla's examples — one
process per device, a DistributedSampler over the replicas, the gradient all-reduce by
`xm.reduce_gradients` before clipping (pytorch/xla issue 1708: clipping first clips each
replica's local gradients), `torch_xla.sync()` per step. drop_last keeps the shapes static.

On XLA:CPU only one replica runs: with CPU_NUM_DEVICES=2 xmp.spawn starts two processes, but
each one's PJRT CPU client owns both devices and the first all-reduce waits for a participant
that never arrives (XLA's rendezvous aborts the process after 10 s; seen with torch_xla 2.9).
So here the world size is 1 and the global batch is --batch: the port of the 2 × 32 reference
takes --batch 64. Planted: --batch 32 with the same --lr (the global batch halved).
--clip-before clips before `xm.optimizer_step` (the issue-1708 order; a fault only with more
than one replica, so not a planted failure here)."""

from __future__ import annotations

import argparse

import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.xla_multiprocessing as xmp
import torch_xla.runtime as xr
from _data import classification, evaluate  # beside this script: sys.path[0]
from torch import nn
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def _mp_fn(index: int, a: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    device = torch_xla.device()
    rank, world = xr.global_ordinal(), xr.world_size()
    torch.manual_seed(4)  # the same initial weights on every replica
    train, val = classification(1024, 1), classification(500, 2)
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(train, batch_size=a.batch, sampler=sampler, drop_last=True)
    net = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 10))
    model = net.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    for epoch in range(a.epochs):
        sampler.set_epoch(epoch)
        model.train()
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            if a.clip_before:
                nn.utils.clip_grad_norm_(model.parameters(), a.max_norm)
                xm.optimizer_step(opt)  # reduces, then steps
            else:
                xm.reduce_gradients(opt)
                nn.utils.clip_grad_norm_(model.parameters(), a.max_norm)
                opt.step()
            torch_xla.sync()
    cpu = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 10))
    cpu.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    _, acc = evaluate(cpu, val)
    if rank == 0:
        print(f"accuracy {acc:.5f}", flush=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--clip-before", action="store_true")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch", type=int, default=64, help="per replica")
    p.add_argument("--max-norm", type=float, default=1.0)
    p.add_argument("--lr", type=float, default=0.1)
    xmp.spawn(_mp_fn, args=(p.parse_args(),))
