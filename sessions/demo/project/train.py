"""Train a small classifier on synthetic clusters. Written for a CUDA GPU; falls back to the CPU."""

import argparse
import time

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from data import make_datasets
from model import Net


def train(args, model, device, loader, optimizer, scheduler, scaler, epoch, use_cuda):
    model.train()
    for batch_idx, (data, target) in enumerate(loader):
        data, target = data.to(device, non_blocking=True), target.to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        with torch.amp.autocast(device_type="cuda", dtype=torch.float16, enabled=use_cuda):
            output = model(data)
            loss = F.cross_entropy(output, target)
        scaler.scale(loss).backward()
        # Unscale first, so that clipping sees the true gradients.
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=args.max_norm)
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
        if batch_idx % args.log_interval == 0:
            print(
                f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(loader.dataset)}]"
                f" Loss: {loss.item():.4f}",
                flush=True,
            )


@torch.no_grad()
def evaluate(model, device, loader, use_cuda):
    model.eval()
    correct = 0
    total_loss = 0.0
    for data, target in loader:
        data, target = data.to(device), target.to(device)
        with torch.amp.autocast(device_type="cuda", dtype=torch.float16, enabled=use_cuda):
            output = model(data)
        total_loss += F.cross_entropy(output.float(), target, reduction="sum").item()
        correct += (output.argmax(dim=1) == target).sum().item()
    n = len(loader.dataset)
    return total_loss / n, 100.0 * correct / n


def main():
    parser = argparse.ArgumentParser(description="Classifier on synthetic clusters")
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
    use_cuda = torch.cuda.is_available()
    device = "cuda" if use_cuda else "cpu"
    torch.backends.cudnn.benchmark = True

    train_set, test_set = make_datasets(data_seed=args.data_seed)
    loader_kwargs = {"num_workers": args.num_workers, "pin_memory": use_cuda}
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, **loader_kwargs)
    test_loader = DataLoader(test_set, batch_size=args.test_batch_size, **loader_kwargs)

    model = Net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=args.lr, epochs=args.epochs, steps_per_epoch=len(train_loader)
    )
    scaler = torch.amp.GradScaler("cuda", enabled=use_cuda)

    print(f"device={device} train={len(train_set)} test={len(test_set)}", flush=True)
    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        train(args, model, device, train_loader, optimizer, scheduler, scaler, epoch, use_cuda)
        test_loss, acc = evaluate(model, device, test_loader, use_cuda)
        print(f"Test Epoch: {epoch} loss={test_loss:.4f} acc={acc:.2f}", flush=True)
    print(f"train_time_s={time.perf_counter() - start:.1f}", flush=True)
    print(f"accuracy={acc:.2f}", flush=True)


if __name__ == "__main__":
    main()
