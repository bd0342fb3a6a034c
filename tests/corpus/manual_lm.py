"""Corpus: a word-language-model-style loop with a hand-written update — no torch.optim
optimizer: `p.data.add_(p.grad, alpha=-lr)` after clip_grad_norm_, batches cut from one long
token stream (no DataLoader), lr annealed when the validation loss stops improving."""

from __future__ import annotations

import argparse

import torch
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=150)
p.add_argument("--lr", type=float, default=5.0)
p.add_argument("--clip", type=float, default=0.25)
p.add_argument("--seed", type=int, default=11)
p.add_argument("--device", choices=("cpu", "xla"), default="cpu")
a = p.parse_args()

torch.set_num_threads(1)
torch.manual_seed(a.seed)
V, T, B = 50, 16, 20
gen = torch.Generator().manual_seed(123)
trans = torch.softmax(3 * torch.randn(V, V, generator=gen), 1)  # a Markov chain of tokens
stream = [0]
for _ in range(40_000):
    stream.append(int(torch.multinomial(trans[stream[-1]], 1, generator=gen)))
data = torch.tensor(stream)
train, val = data[:32_000], data[32_000:]


class Bigram(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(V, 32)
        self.out = nn.Linear(32, V)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.emb(x)))


def batch(src: torch.Tensor, i: int) -> tuple[torch.Tensor, torch.Tensor]:
    n = (len(src) - 1) // B
    cols = src[: n * B + 1]
    start = (i * T) % (n - T)
    idx = torch.arange(B) * n + start
    x = torch.stack([cols[j : j + T] for j in idx.tolist()])
    y = torch.stack([cols[j + 1 : j + T + 1] for j in idx.tolist()])
    return x, y


model = Bigram()
sync = None
if a.device == "xla":  # the same loop ported to torch_xla: still no torch.optim
    import torch_xla

    model, sync = model.to(torch_xla.device()), torch_xla.sync
device = next(model.parameters()).device
crit = nn.CrossEntropyLoss()
lr, best = a.lr, None
for step in range(a.steps):
    model.train()
    x, y = batch(train, step)
    x, y = x.to(device), y.to(device)
    out = model(x)
    loss = crit(out.view(-1, V), y.view(-1))
    model.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
    for p_ in model.parameters():
        p_.data.add_(p_.grad, alpha=-lr)
    if sync:
        sync()
    if (step + 1) % 50 == 0 or step + 1 == a.steps:
        model.eval()
        with torch.no_grad():
            vx, vy = (t.to(device) for t in batch(val, 0))
            v = float(crit(model(vx).view(-1, V), vy.view(-1)))
        if best is not None and v > best:
            lr /= 4.0
        best = v if best is None else min(best, v)
print(f"final_loss {best:.6f}")
