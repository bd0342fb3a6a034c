"""An unclipped MLP regression on CPU or XLA whose port can plant a pure gradient-norm drift.

--device cpu|xla   xla: torch_xla.device(), torch_xla.sync() after every step (zero_grad at the
                   top of the loop, as most ports do)
--opt sgd|adam     SGD (lr 0.05) or Adam (lr 1e-3; it creates its state at step 0, so step 1
                   compiles once more)
--grad-scale K     every parameter gradient is multiplied by K (a tensor hook, like a loss
                   scale never undone): with Adam, which is blind to the gradients' scale, the
                   loss and the learning rate stay the reference's; only the gradient norm is
                   K times larger
--steps N          optimizer steps
--unfreeze-at N    the first layer is frozen (requires_grad False) until step N: the step graph
                   changes once, and so does the set of gradients
Prints after the loop: COMPILES <CompileTime count> (xla), GT <step> <loss> per step, and on
the CPU GN <step> <total gradient 2-norm> per step (computed here, before opt.step()).
"""

import argparse

import torch

p = argparse.ArgumentParser()
p.add_argument("--device", choices=["cpu", "xla"], default="cpu")
p.add_argument("--grad-scale", type=float, default=1.0)
p.add_argument("--steps", type=int, default=100)
p.add_argument("--unfreeze-at", type=int, default=-1)
p.add_argument("--opt", choices=["sgd", "adam"], default="sgd")
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
if a.unfreeze_at > 0:
    model[0].requires_grad_(False)
if a.opt == "adam":
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
else:
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
xs = [x.to(dev) for x in x_all]  # device data: one graph for every batch
ys = [y.to(dev) for y in y_all]
losses, norms = [], []
for i in range(a.steps):
    if i == a.unfreeze_at:
        model[0].requires_grad_(True)
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(xs[i % 8]), ys[i % 8])
    loss.backward()
    if a.device == "cpu":
        norms.append(torch.linalg.vector_norm(torch.stack([q.grad.norm() for q in model.parameters() if q.grad is not None])))
    opt.step()
    losses.append(loss.detach())
    sync()
if met is not None:
    print("COMPILES", met.metric_data("CompileTime")[0], flush=True)
for i, loss in enumerate(losses):
    print("GT", i, repr(float(loss.cpu())), flush=True)
for i, norm in enumerate(norms):
    print("GN", i, repr(float(norm)), flush=True)
