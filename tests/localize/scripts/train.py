"""A small classifier whose details each planted case changes (one flag per case).

--device cpu|xla      xla: torch_xla (the XLA:CPU tests)
--label-smoothing F   in the loss
--norm-mean F         input normalisation constant
--dropout F           rate of encoder.2
--act relu|gelu       activation encoder.1 (and encoder.4)
--no-bias3            encoder.3 without bias (a changed layer)
--max-norm F          clip_grad_norm_
--lr F, --wd F        SGD learning rate and weight decay
--threads N           torch.set_num_threads
--init-seed N         seed of the model's initial weights
--init-on-device      create the model on the device (its RNG, not the CPU's)
--bf16                autocast to bfloat16
--steps N             optimizer steps (the trace stops the run after its K)
Prints "STEPS_DONE n" at the end (absent when the trace ended the run early).
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--device", default="cpu")
p.add_argument("--label-smoothing", type=float, default=0.0)
p.add_argument("--norm-mean", type=float, default=0.5)
p.add_argument("--dropout", type=float, default=0.0)
p.add_argument("--act", default="relu")
p.add_argument("--no-bias3", action="store_true")
p.add_argument("--max-norm", type=float, default=1.0)
p.add_argument("--lr", type=float, default=0.05)
p.add_argument("--wd", type=float, default=0.0)
p.add_argument("--threads", type=int, default=0)
p.add_argument("--init-seed", type=int, default=0)
p.add_argument("--init-on-device", action="store_true")
p.add_argument("--bf16", action="store_true")
p.add_argument("--steps", type=int, default=20)
a = p.parse_args()

if a.threads:
    torch.set_num_threads(a.threads)
if a.device == "xla":
    import torch_xla

    dev = torch_xla.device()
else:
    dev = torch.device(a.device)  # cpu, or cuda on a machine that has one


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        act = nn.GELU if a.act == "gelu" else nn.ReLU
        self.encoder = nn.Sequential(
            nn.Linear(16, 64), act(), nn.Dropout(a.dropout), nn.Linear(64, 64, bias=not a.no_bias3),
            act(),
        )
        self.head = nn.Linear(64, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))


torch.manual_seed(a.init_seed)
if a.init_on_device:
    with torch.device(dev):
        model = Net()
else:
    model = Net().to(dev)
opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9, weight_decay=a.wd)
data = torch.Generator().manual_seed(1234)  # the data does not depend on the model's seed
for _step in range(a.steps):
    x = torch.randn(128, 16, generator=data) * 2.0 + 0.5
    y = torch.randint(0, 4, (128,), generator=data)
    x, y = ((x - a.norm_mean) / 2.0).to(dev), y.to(dev)
    opt.zero_grad()
    with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=a.bf16):
        out = model(x)
    loss = F.cross_entropy(out.float(), y, label_smoothing=a.label_smoothing)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), a.max_norm)
    opt.step()
    if a.device == "xla":
        torch_xla.sync()
print("STEPS_DONE", a.steps, flush=True)
