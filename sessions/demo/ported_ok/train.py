"""Train a small classifier on synthetic clusters, on an XLA device (TPU, or XLA:CPU).

The correct torch_xla port of ../project/train.py: it replaces that file; data.py and model.py
are unchanged (run from here with PYTHONPATH=../project). What changed and why:

- device = torch_xla.device(); the CUDA-only pieces (cudnn.benchmark, float16 autocast,
  GradScaler) are gone. GradScaler was disabled off CUDA anyway, so the numerics stay float32
  as in the reference runs.
- torch_xla.sync() ends every step, so each step is one compiled graph.
- drop_last=True keeps every batch the same shape (no recompilation on a short last batch).
  With the default 20480 samples and batch 64 no batch is dropped, so the LR schedule is the
  same as the reference's.
- Clipping stays right after backward() with the same max_norm. On one device there is no
  gradient all-reduce; on several replicas call xm.reduce_gradients(optimizer) before clipping
  (xm.optimizer_step would all-reduce after the clip and clip local gradients).
- No .item() inside the step: losses are printed from xm.add_step_closure, after the step's
  graph has run; evaluation accumulates on the device and reads once.
"""

import argparse
import time

import torch
import torch.nn.functional as F
import torch_xla
import torch_xla.core.xla_model as xm
from data import make_datasets
from model import Net
from torch.utils.data import DataLoader


def _log_progress(epoch, seen, total, loss):
    print(f"Train Epoch: {epoch} [{seen}/{total}] Loss: {loss.item():.4f}", flush=True)


def train(args, model, device, loader, optimizer, scheduler, epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad(set_to_none=True)
        output = model(data)
        loss = F.cross_entropy(output, target)
        loss.backward()
        # One device: no all-reduce needed before clipping.
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=args.max_norm)
        optimizer.step()
        scheduler.step()
        if batch_idx % args.log_interval == 0:
            xm.add_step_closure(
                _log_progress, args=(epoch, batch_idx * len(data), len(loader.dataset), loss)
            )
        torch_xla.sync()


@torch.no_grad()
def evaluate(model, device, loader):
    model.eval()
    correct = torch.zeros((), dtype=torch.long, device=device)
    total_loss = torch.zeros((), device=device)
    for data, target in loader:
        data, target = data.to(device), target.to(device)
        output = model(data)
        total_loss += F.cross_entropy(output, target, reduction="sum")
        correct += (output.argmax(dim=1) == target).sum()
        torch_xla.sync()
    n = len(loader.dataset)
    return total_loss.item() / n, 100.0 * correct.item() / n


def main():
    parser = argparse.ArgumentParser(description="Classifier on synthetic clusters (torch_xla)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--test-batch-size", type=int, default=1000)
    parser.add_argument("--lr", type=float, default=0.1, help="peak learning rate (OneCycle)")
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--max-norm", type=float, default=1.0, help="gradient clipping norm")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-seed", type=int, default=1234)
    parser.add_argument("--log-interval", type=int, default=50)
    parser.add_argument("--num-workers", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    device = torch_xla.device()

    train_set, test_set = make_datasets(data_seed=args.data_seed)
    loader_kwargs = {"num_workers": args.num_workers, "drop_last": True}
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, **loader_kwargs)
    test_loader = DataLoader(test_set, batch_size=args.test_batch_size, **loader_kwargs)

    model = Net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=args.lr, epochs=args.epochs, steps_per_epoch=len(train_loader)
    )

    print(f"device={device} train={len(train_set)} test={len(test_set)}", flush=True)
    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        train(args, model, device, train_loader, optimizer, scheduler, epoch)
        test_loss, acc = evaluate(model, device, test_loader)
        print(f"Test Epoch: {epoch} loss={test_loss:.4f} acc={acc:.2f}", flush=True)
    print(f"train_time_s={time.perf_counter() - start:.1f}", flush=True)
    print(f"accuracy={acc:.2f}", flush=True)


if __name__ == "__main__":
    main()
