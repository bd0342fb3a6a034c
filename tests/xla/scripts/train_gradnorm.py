"""An unclipped MLP regression on CPU or XLA whose port can plant a pure gradient-norm drift.

--device cpu|xla   xla: torch_xla.device(), torch_xla.sync() after every step (zero_grad at the
                   top of the loop, as most ports do)
--grad-scale K     every parameter gradient is multiplied by K (a tensor hook) and the SGD
                   learning rate divided by K: the parameter trajectory and so the loss are
                   unchanged, only the gradient norm is K times larger (what a port that folds
                   a loss scale into the learning rate does)
--steps N          optimizer steps
Prints after the loop: COMPILES <CompileTime count> (xla), then GT <step> <loss> per step.
"""

import argparse

import torch

p = argparse.ArgumentParser()
p.add_argument("--device", choices=["cpu", "xla"], default="cpu")
p.add_argument("--grad-scale", type=float, default=1.0)
p.add_argument("--steps", type=int, default=100)
a = p.parse_args()

torch.set_num_threads(1)
if a.device == "xla":
    import torch_xla
    import torch_xla.debug.metrics as met

    dev = torch_xla.device()
    sync = torch_xla.sync
else:
    dev, met = torch.device("cpu"), None

    def sync() -> None:
        pass


torch.manual_seed(0)
gen = torch.Generator().manual_seed(1)
WIDTH, BATCH = 512, 256  # a step of ~20 ms: the norm's fixed launch cost is < 1% of it
x_all = torch.randn(8, BATCH, WIDTH, generator=gen)
w_true = torch.randn(WIDTH, 1, generator=gen) / WIDTH**0.5
y_all = x_all @ w_true + 0.1 * torch.randn(8, BATCH, 1, generator=gen)
model = torch.nn.Sequential(
    torch.nn.Linear(WIDTH, WIDTH), torch.nn.Tanh(), torch.nn.Linear(WIDTH, WIDTH), torch.nn.Tanh(),
    torch.nn.Linear(WIDTH, 1),
).to(dev)
if a.grad_scale != 1.0:
    for prm in model.parameters():
        prm.register_hook(lambda g, k=a.grad_scale: g * k)
opt = torch.optim.SGD(model.parameters(), lr=0.05 / a.grad_scale)
xs = [x.to(dev) for x in x_all]  # device data: one graph for every batch
ys = [y.to(dev) for y in y_all]
losses = []
for i in range(a.steps):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(xs[i % 8]), ys[i % 8])
    loss.backward()
    opt.step()
    losses.append(loss.detach())
    sync()
if met is not None:
    print("COMPILES", met.metric_data("CompileTime")[0], flush=True)
for i, loss in enumerate(losses):
    print("GT", i, repr(float(loss.cpu())), flush=True)
