"""Seeds every RNG the way training code does, then prints draws and a short training loss."""

import random

import numpy as np
import torch

torch.manual_seed(123)
torch.random.manual_seed(123)
random.seed(123)
np.random.seed(seed=123)
print("RANDOM", repr(random.random()))
print("NUMPY", repr(float(np.random.rand())))
print("TORCH", repr(float(torch.rand(()))))
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(16, 4), torch.randn(16, 1)
for _ in range(3):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
print("LOSS", repr(float(loss)))
