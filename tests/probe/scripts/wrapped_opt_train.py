"""Steps an optimizer through a library's wrapper (see site-packages/wrapped_opt): --trainer
through a trainer object that holds the wrapper."""

from __future__ import annotations

import os
import sys

import torch

# Kept: a script in a fresh interpreter whose stand-in library must load from a folder named
# site-packages (the probe tells a library's frames by their path); nothing else adds it.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "site-packages"))
from wrapped_opt import Trainer, WrappedOptimizer  # noqa: E402

net = torch.nn.Linear(4, 2)
if "--trainer" in sys.argv:
    trainer = Trainer(torch.optim.AdamW(net.parameters()))
    stepper = trainer
else:
    optimizer = WrappedOptimizer(torch.optim.AdamW(net.parameters()))
    stepper = optimizer
for _ in range(3):
    net(torch.randn(8, 4)).pow(2).mean().backward()
    stepper.step()
