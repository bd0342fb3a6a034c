"""Tiny CPU training loop that prints its own ground truth, one line per optimizer step.

GT <step> <repr(loss)> <repr(clip return or own norm)> <repr(lr)>
Options: --import-style {module,from}  --no-clip  --scaler  --steps N  --seed S  --sleep S
         --clip-api {norm_,split,deprecated}: clip_grad_norm_, get_total_norm then
         clip_grads_with_norm_, or the deprecated clip_grad_norm
"""

import argparse
import random
import sys
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=8)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--import-style", choices=["module", "from"], default="module")
p.add_argument("--no-clip", action="store_true")
p.add_argument("--scaler", action="store_true")
p.add_argument("--sleep", type=float, default=0.0)
p.add_argument("--max-norm", type=float, default=0.5)
p.add_argument("--clip-api", choices=["norm_", "split", "deprecated"], default="norm_")
a = p.parse_args()

if a.import_style == "from":
    from torch.nn.utils import clip_grad_norm_
else:
    clip_grad_norm_ = None

torch.manual_seed(a.seed)
random.seed(a.seed)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0) if a.scaler else None
x = torch.randn(64, 8)
y = torch.randn(64, 1) + random.random()

for step in range(a.steps):
    opt.zero_grad()
    if scaler is not None:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = torch.nn.functional.mse_loss(model(x).float(), y)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
    else:
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
    lr = opt.param_groups[0]["lr"]
    if a.no_clip:
        norm = torch.nn.utils.get_total_norm([q.grad for q in model.parameters()])
        own = sum(float(q.grad.double().pow(2).sum()) for q in model.parameters()) ** 0.5
        print("OWN", step, repr(own))
    elif a.clip_api == "split":
        norm = torch.nn.utils.get_total_norm([q.grad for q in model.parameters()])
        torch.nn.utils.clip_grads_with_norm_(model.parameters(), a.max_norm, norm)
    elif a.clip_api == "deprecated":
        norm = torch.nn.utils.clip_grad_norm(model.parameters(), a.max_norm)
    elif clip_grad_norm_ is not None:
        norm = clip_grad_norm_(model.parameters(), a.max_norm)
    else:
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=a.max_norm)
    if scaler is not None:
        scaler.step(opt)
        scaler.update()
    else:
        opt.step()
    sched.step()
    print("GT", step, repr(float(loss)), repr(float(norm)), repr(lr), flush=True)
    if a.sleep:
        time.sleep(a.sleep)
print("DONE", "torch" in sys.modules)
