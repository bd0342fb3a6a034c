"""Small torch_xla training loop that reports its own ground truth.

--batches 8,8,16  batch size of each step (a new size means a new graph)
--clip            clip with torch.nn.utils.clip_grad_norm_ (torch_xla's replacement)
--mask            boolean masking in the loss (aten::nonzero runs on the CPU)
--opt adam|sgd    adam creates its state at step 0, so step 1 compiles once more
--opt none        a hand-written update (p.data.add_ after backward), no torch.optim
--zero-late       opt.zero_grad() after opt.step(), before torch_xla.sync(): the gradients are
                  freed before the step's graph runs
Prints after the loop: COMPILES <CompileTime count>, then GT <step> <loss> <norm> per step.
"""

import argparse

import torch
import torch_xla
import torch_xla.debug.metrics as met

p = argparse.ArgumentParser()
p.add_argument("--batches", default="8,8,8,8,8,8")
p.add_argument("--clip", action="store_true")
p.add_argument("--mask", action="store_true")
p.add_argument("--opt", choices=["adam", "sgd", "none"], default="sgd")
p.add_argument("--zero-late", action="store_true")
a = p.parse_args()

torch.manual_seed(0)
dev = torch_xla.device()
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)).to(
    dev
)
if a.opt == "adam":
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
elif a.opt == "sgd":
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
else:
    opt = None
losses, norms = [], []
for bs in [int(b) for b in a.batches.split(",")]:
    x = torch.randn(bs, 16).to(dev)
    y = torch.randn(bs, 1).to(dev)
    if opt is not None:
        opt.zero_grad()
    else:
        model.zero_grad()
    out = model(x)
    if a.mask:
        keep = y > 0
        loss = ((out[keep] - y[keep]) ** 2).mean() + ((out - y) ** 2).mean()
    else:
        loss = torch.nn.functional.mse_loss(out, y)
    loss.backward()
    if a.clip:
        norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5))
    if opt is not None:
        opt.step()
    else:
        with torch.no_grad():
            for p_ in model.parameters():
                p_.data.add_(-0.01 * p_.grad)
    if a.zero_late:
        opt.zero_grad()
    losses.append(loss.detach())
    torch_xla.sync()
print("COMPILES", met.metric_data("CompileTime")[0], flush=True)
for i, loss in enumerate(losses):
    norm = repr(float(norms[i].cpu())) if norms else "-"
    print("GT", i, repr(float(loss.cpu())), norm, flush=True)
