"""Imports torch and computes, but never steps an optimizer."""

import torch

print("SUM", float(torch.ones(3).sum()))
