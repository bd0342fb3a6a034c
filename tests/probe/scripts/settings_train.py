"""Two optimizers (a GAN-style pair), a DataLoader and bf16 autocast; prints what it set up,
as ground truth for the probe's settings facts: GT <json>."""

import json

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
gen = nn.Linear(4, 3)
disc = nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 1))
g_kw = {"betas": (0.5, 0.999), "eps": 1e-7, "weight_decay": 0.0}
d_kw = {"momentum": 0.8, "nesterov": True, "weight_decay": 0.01, "dampening": 0.0}
opt_g = torch.optim.Adam(gen.parameters(), lr=1e-3, **g_kw)
opt_d = torch.optim.SGD(disc.parameters(), lr=0.1, **d_kw)
loader = DataLoader(TensorDataset(torch.randn(40, 3)), batch_size=8, shuffle=False,
                    drop_last=True)
for _epoch in range(3):
    for (x,) in loader:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            d = disc(x).float().mean() - disc(gen(torch.randn(8, 4)).detach()).float().mean()
        opt_d.zero_grad()
        (-d).backward()
        opt_d.step()
        g = -disc(gen(torch.randn(8, 4))).mean()
        opt_g.zero_grad()
        g.backward()
        opt_g.step()
print("GT", json.dumps({"opt_d": d_kw, "opt_g": {**g_kw, "betas": list(g_kw["betas"])},
                        "batch": 8, "data_len": 40, "steps": 2 * 3 * 5}))
