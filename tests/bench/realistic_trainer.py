"""A trainer whose step costs what a real model's step costs on a CPU (bench_stop_decided.py).

A small convolutional network (three 3x3 conv blocks with batch norm, 32 -> 64 -> 128
channels, then a linear head) on synthetic 32x32 RGB images, SGD with momentum, a cosine LR
schedule and ``clip_grad_norm_``: an ordinary torch script, nothing portside-specific, run
under the probe as any user's script is. One step (forward, backward, clip, optimizer) of a
batch of 48 takes ~55-65 ms on one CPU core, where train_tiny.py's MLP takes about 1 ms
unloaded; so start-up (interpreter, torch import, data) is a small part of a long run, as it
is in real training.

One intra-op thread (``--threads``, default 1, as tests/bench/acceptance_trainer.py): on a
shared 2-core machine two threads wait for each other at every kernel whenever a neighbour
holds the other core (the same step measured 65 ms, then 500 ms for seconds at a time), and
the run's length would say more about the neighbours than about the model.

The images: a bright 8x8 blob in one of four quadrants (the class) over Gaussian noise, with
a colour tint that depends on the class too; made once from their own generator
(``--data-seed``), so ``--seed`` moves only the initialisation and the batch order.

Flags (those of train_tiny.py the benchmark passes)::

  --steps N          optimizer steps (default 200)
  --seed N           torch.manual_seed(N) (default 0)
  --data-seed N      the images' generator (default 1234)
  --lr X             peak learning rate (default 0.05)
  --max-norm X       clip_grad_norm_ max_norm (default 1.0); 0.05: every step clips
  --no-clip          no clipping at all
  --no-scheduler     constant LR
  --weight-decay X   SGD weight decay (default 1e-4)
  --batch-size N     (default 48)
  --threads N        torch.set_num_threads(N) (default 1)

Output: ``step=<i> loss=<float> grad_norm=<float>`` a step, ``accuracy=<percent>`` at the end.
"""

import argparse
import sys

import torch
import torch.nn.functional as F
from torch import nn

NUM_CLASSES = 4
SIZE = 32


def make_data(n, gen):
    """n images (n, 3, 32, 32) and their labels: the quadrant of a bright blob."""
    y = torch.randint(0, NUM_CLASSES, (n,), generator=gen)
    x = 0.8 * torch.randn(n, 3, SIZE, SIZE, generator=gen)
    rows = torch.randint(0, SIZE // 2 - 8, (n,), generator=gen) + (y // 2) * (SIZE // 2)
    cols = torch.randint(0, SIZE // 2 - 8, (n,), generator=gen) + (y % 2) * (SIZE // 2)
    tint = torch.tensor([[1.0, 0.4, 0.2], [0.2, 1.0, 0.4], [0.4, 0.2, 1.0], [0.7, 0.7, 0.7]])
    for i in range(n):
        r, c = int(rows[i]), int(cols[i])
        x[i, :, r : r + 8, c : c + 8] += 1.5 * tint[y[i]].view(3, 1, 1)
    return x, y


def block(cin, cout, stride):
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


def make_model():
    return nn.Sequential(
        block(3, 32, 1),
        block(32, 64, 2),
        block(64, 128, 2),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(128, NUM_CLASSES),
    )


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-seed", type=int, default=1234)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--max-norm", type=float, default=1.0)
    p.add_argument("--no-clip", action="store_true")
    p.add_argument("--no-scheduler", action="store_true")
    p.add_argument("--weight-decay", type=float, default=1e-4)
    p.add_argument("--batch-size", type=int, default=48)
    p.add_argument("--threads", type=int, default=1)
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.data_seed)
    x_train, y_train = make_data(2048, gen)
    x_test, y_test = make_data(512, gen)

    model = make_model()
    params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=args.lr, momentum=0.9, weight_decay=args.weight_decay)
    sched = None
    if not args.no_scheduler:
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(
            opt, T_max=args.steps, eta_min=0.01 * args.lr
        )

    order = torch.randperm(len(x_train))
    pos = 0
    model.train()
    for step in range(args.steps):
        bs = args.batch_size
        if pos + bs > len(order):
            order, pos = torch.randperm(len(x_train)), 0
        idx = order[pos : pos + bs]
        pos += bs
        xb, yb = x_train[idx], y_train[idx]

        opt.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        if args.no_clip:
            grad_norm = torch.linalg.vector_norm(
                torch.stack([torch.linalg.vector_norm(p.grad.detach()) for p in params])
            )
        else:
            grad_norm = torch.nn.utils.clip_grad_norm_(params, max_norm=args.max_norm)
        opt.step()
        print(f"step={step} loss={loss.item()!r} grad_norm={grad_norm.item()!r}", flush=True)
        if sched is not None:
            sched.step()

    model.eval()
    with torch.no_grad():
        pred = model(x_test).argmax(dim=1)
    print(f"accuracy={100.0 * (pred == y_test).float().mean().item():.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
