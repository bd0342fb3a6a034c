"""A few SPMD steps on XLA:CPU for the probe's `compute_devices` (tests/xla/test_compute_devices_xla.py).

--shard none|data|model|both: what is sharded over a (2, 2) mesh ("data", "model") — the batch
along "data", the first layer's weight along "model". --sync-early: torch_xla.sync() between
backward() and optimizer.step() (the loss is device data by the step). --no-spmd: plain
torch_xla, one device."""

from __future__ import annotations

import argparse

import numpy as np
import torch
import torch_xla
import torch_xla.distributed.spmd as xs
import torch_xla.runtime as xr
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--shard", choices=("none", "data", "model", "both"), default="data")
p.add_argument("--sync-early", action="store_true")
p.add_argument("--no-spmd", action="store_true")
a = p.parse_args()

torch.set_num_threads(1)
if not a.no_spmd:
    xr.use_spmd()
    n = xr.global_runtime_device_count()
    mesh = xs.Mesh(np.arange(n), (2, n // 2), ("data", "model"))
device = torch_xla.device()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).to(device)
if a.shard in ("model", "both") and not a.no_spmd:
    xs.mark_sharding(model[0].weight, mesh, ("model", None))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    x, y = torch.randn(32, 16).to(device), torch.randint(0, 4, (32,)).to(device)
    if a.shard in ("data", "both") and not a.no_spmd:
        xs.mark_sharding(x, mesh, ("data", None))
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    if a.sync_early:
        torch_xla.sync()
    opt.step()
    torch_xla.sync()
