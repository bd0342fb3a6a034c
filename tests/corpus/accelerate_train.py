"""A classifier trained through HF accelerate (issue 37.5: the real library, not a stand-in).
--cpu forces the CPU; without it accelerate takes torch_xla's device where PJRT_DEVICE is set
(the port). --plain: the same training without accelerate (the script before it was ported to
accelerate). Wrong ports through accelerate's own configuration: --max-norm, --accum."""
import argparse

import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--cpu", action="store_true")
p.add_argument("--plain", action="store_true")
p.add_argument("--max-norm", type=float, default=1.0)
p.add_argument("--accum", type=int, default=1)
p.add_argument("--epochs", type=int, default=3)
a = p.parse_args()
torch.manual_seed(1)
gen = torch.Generator().manual_seed(7)
w = torch.randn(16, 4, generator=gen)
x = torch.randn(1024, 16, generator=gen)
y = (x @ w).argmax(1)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
if a.plain:
    for _ in range(a.epochs):
        for xb, yb in loader:
            loss = nn.functional.cross_entropy(model(xb), yb)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), a.max_norm)
            opt.step()
            opt.zero_grad()
    with torch.no_grad():
        print(f"accuracy {(model(x).argmax(1) == y).float().mean().item():.4f}")
    raise SystemExit(0)
acc = Accelerator(cpu=a.cpu, gradient_accumulation_steps=a.accum)
model, opt, loader = acc.prepare(model, opt, loader)
for _ in range(a.epochs):
    for xb, yb in loader:
        with acc.accumulate(model):
            loss = nn.functional.cross_entropy(model(xb), yb)
            acc.backward(loss)
            if acc.sync_gradients:
                acc.clip_grad_norm_(model.parameters(), a.max_norm)
            opt.step()
            opt.zero_grad()
with torch.no_grad():
    xs, ys = x.to(acc.device), y.to(acc.device)
    print(f"accuracy {(model(xs).argmax(1) == ys).float().mean().item():.4f}")
print("device", acc.device)
