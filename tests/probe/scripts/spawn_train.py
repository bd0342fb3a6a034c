"""The parent trains 2 steps and a spawned worker (not rank-identified) trains 3."""

import multiprocessing as mp
import os

import torch


def train(steps: int) -> None:
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    print("TRAINED", os.getpid(), steps, flush=True)


if __name__ == "__main__":
    train(2)
    ctx = mp.get_context("spawn")
    p = ctx.Process(target=train, args=(3,))
    p.start()
    p.join()
    # A forked child that never steps must not rewrite the parent's records.
    f = mp.get_context("fork").Process(target=print, args=("FORKED",))
    f.start()
    f.join()
    print("EXIT", p.exitcode, f.exitcode)
