"""Synthetic data for the corpus scripts: fixed by its own generator, so only the model's
initialisation and the shuffling follow the (shifted) seeds."""

from __future__ import annotations

import torch
from torch.utils.data import TensorDataset


def classification(n: int, seed: int, features: int = 20, classes: int = 10) -> TensorDataset:
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(features, classes, generator=torch.Generator().manual_seed(7))
    x = torch.randn(n, features, generator=gen)
    y = (x @ w + 0.7 * torch.randn(n, classes, generator=gen)).argmax(1)
    return TensorDataset(x, y)


def evaluate(model: torch.nn.Module, data: TensorDataset) -> tuple[float, float]:
    model.eval()
    with torch.no_grad():
        x, y = data.tensors
        out = model(x)
        loss = float(torch.nn.functional.cross_entropy(out, y))
        acc = float((out.argmax(1) == y).float().mean())
    return loss, acc
