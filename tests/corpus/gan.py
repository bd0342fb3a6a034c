"""Corpus: a DCGAN-style loop on a 2-D toy distribution — two Adam optimizers (discriminator
stepped first, then generator) with the DCGAN betas (0.5, 0.999). Planted: the generator's
betas back at Adam's default, weight decay added to the discriminator. Tiny MLPs, 60 steps."""

from __future__ import annotations

import argparse

import torch
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=60)
p.add_argument("--g-beta1", type=float, default=0.5)
p.add_argument("--d-weight-decay", type=float, default=0.0)
p.add_argument("--swap", action="store_true", help="create the generator's optimizer first")
a = p.parse_args()

torch.set_num_threads(1)
torch.manual_seed(3)
gen = torch.Generator().manual_seed(17)
real = torch.randn(2048, 2, generator=gen) * torch.tensor([0.5, 2.0]) + torch.tensor([1.0, -1.0])
netG = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
netD = nn.Sequential(nn.Linear(2, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))


def adam_d() -> torch.optim.Adam:
    return torch.optim.Adam(netD.parameters(), lr=2e-3, betas=(0.5, 0.999),
                            weight_decay=a.d_weight_decay)


def adam_g() -> torch.optim.Adam:
    return torch.optim.Adam(netG.parameters(), lr=2e-3, betas=(a.g_beta1, 0.999))


if a.swap:  # the same two optimizers, made in the other order
    optG, optD = adam_g(), adam_d()
else:
    optD, optG = adam_d(), adam_g()
bce = nn.BCEWithLogitsLoss()
for step in range(a.steps):
    x = real[(step * 32) % 2048:(step * 32) % 2048 + 32]
    z = torch.randn(32, 4)
    fake = netG(z)
    optD.zero_grad()
    d_loss = bce(netD(x), torch.ones(32, 1)) + bce(netD(fake.detach()), torch.zeros(32, 1))
    d_loss.backward()
    optD.step()
    optG.zero_grad()
    g_loss = bce(netD(fake), torch.ones(32, 1))
    g_loss.backward()
    optG.step()
with torch.no_grad():
    sample = netG(torch.randn(1024, 4))
    err = float((sample.mean(0) - real.mean(0)).abs().sum())
print(f"final_loss {err:.6f}")
