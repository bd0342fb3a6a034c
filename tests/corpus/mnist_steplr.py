"""Corpus: an MNIST-example-style classifier — Adadelta, per-epoch StepLR, a shuffling
DataLoader (optionally with workers and drop_last), BatchNorm with train/eval switching,
gradient clipping. Synthetic data; a few seconds on one CPU thread. --device xla is its
torch_xla port (XLA:CPU with PJRT_DEVICE=CPU): model and batches on the XLA device, a
`torch_xla.sync()` per step, evaluation on a CPU copy of the weights (no graph of its own).
--mp-loader feeds the XLA port through torch_xla's MpDeviceLoader (batches fetched ahead in
a background thread, then moved to the device; its iterator syncs the step)."""

from __future__ import annotations

import argparse
import contextlib

import torch
from _data import classification, evaluate  # beside this script: sys.path[0]
from torch import nn
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=8)
p.add_argument("--batch", type=int, default=64)
p.add_argument("--lr", type=float, default=1.0)
p.add_argument("--gamma", type=float, default=0.7)
p.add_argument("--drop-last", action="store_true")
p.add_argument("--workers", type=int, default=0)
p.add_argument("--no-sched", action="store_true")
p.add_argument("--weight-decay", type=float, default=0.0)
p.add_argument("--max-norm", type=float, default=1.0)
p.add_argument("--device", choices=("cpu", "xla"), default="cpu")
p.add_argument("--mp-loader", action="store_true", help="xla: torch_xla's MpDeviceLoader")
p.add_argument("--no-shuffle", action="store_true", help="planted: the data in file order")
p.add_argument("--autocast", action="store_true", help="planted: a silent bf16 forward")
p.add_argument("--forget-train", action="store_true", help="planted: BN stays in eval mode")
a = p.parse_args()

torch.set_num_threads(1)
torch.manual_seed(1)
train, test = classification(1000, 1), classification(500, 2)
loader = DataLoader(train, batch_size=a.batch, shuffle=not a.no_shuffle, drop_last=a.drop_last,
                    num_workers=a.workers)


def make() -> nn.Module:
    return nn.Sequential(nn.Linear(20, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 10))


model = make()
sync = None
if a.device == "xla":
    import torch_xla

    model, sync = model.to(torch_xla.device()), torch_xla.sync
    if a.mp_loader:
        from torch_xla.distributed.parallel_loader import MpDeviceLoader

        loader = MpDeviceLoader(loader, torch_xla.device())  # type: ignore[assignment]
device = next(model.parameters()).device
opt = torch.optim.Adadelta(model.parameters(), lr=a.lr, weight_decay=a.weight_decay)
sched = StepLR(opt, step_size=1, gamma=a.gamma)
for epoch in range(a.epochs):
    if epoch == 0 or not a.forget_train:
        model.train()
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        opt.zero_grad()
        with (torch.autocast(device.type, dtype=torch.bfloat16) if a.autocast
              else contextlib.nullcontext()):
            out = model(x)
        loss = nn.functional.cross_entropy(out.float(), y)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), a.max_norm)
        opt.step()
        if sync:
            sync()
    if sync:  # the weights to the host; evaluating on the device would compile its own graph
        cpu = make()
        cpu.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
        test_loss, acc = evaluate(cpu, test)
        model.train(cpu.training)
    else:
        test_loss, acc = evaluate(model, test)
    print(f"epoch {epoch} test_loss {test_loss:.5f}")
    if not a.no_sched:
        sched.step()
print(f"accuracy {acc:.5f}")
