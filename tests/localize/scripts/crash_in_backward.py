"""Runs train.py (with this script's arguments) with a backward() that raises: a candidate that
crashes in its first step, after its forward."""

import runpy
import sys
from pathlib import Path

import torch


def backward(self, *args, **kwargs):
    raise RuntimeError("planted crash in backward")


torch.Tensor.backward = backward
script = Path(__file__).with_name("train.py")
sys.argv = [str(script), *sys.argv[1:]]
runpy.run_path(str(script), run_name="__main__")
