"""A loop whose loss makes the probe's own backward hook slow, by a known amount.

The probe reads the value of the loss backward() is called on (`.item()`, on the CPU) inside its
hook; here that read sleeps SLOW_S, and the script counts the reads, so the time spent inside
the probe's hook is known from outside the probe. Prints `READS <n> <slow_s>`.
"""

import sys
import time

import torch

SLOW_S = 0.004
reads = 0


class SlowLoss(torch.Tensor):
    def item(self) -> float:
        global reads
        reads += 1
        time.sleep(SLOW_S)
        return super().item()


steps = int(sys.argv[1]) if len(sys.argv) > 1 else 112
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(16, 4), torch.randn(16, 1)
for _ in range(steps):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y).as_subclass(SlowLoss)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
print("READS", reads, SLOW_S)
