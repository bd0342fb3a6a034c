"""A classifier trained by Lightning's Trainer (issue 37.5: the real library). --batch and
--accum split the batch into micro-batches (the same global batch: a correct port where memory
is short); --clip changes gradient_clip_val through the Trainer's own configuration. Where
PJRT_DEVICE is set (the torch_xla port) the Trainer runs on Lightning's own XLA accelerator and
single-device XLA strategy; that accelerator counts TPU chips only, so on XLA:CPU it counts the
PJRT runtime's devices instead (on a TPU host it is accelerator="tpu", nothing else changes)."""
import argparse
import os

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=32)
p.add_argument("--accum", type=int, default=1)
p.add_argument("--clip", type=float, default=1.0)
a = p.parse_args()

gen = torch.Generator().manual_seed(7)
w = torch.randn(16, 4, generator=gen)
x = torch.randn(1024, 16, generator=gen)
y = (x @ w).argmax(1)


class Net(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))

    def training_step(self, batch, _):  # type: ignore[no-untyped-def]
        xb, yb = batch
        return nn.functional.cross_entropy(self.net(xb), yb)

    def configure_optimizers(self):  # type: ignore[no-untyped-def]
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


def _accelerator():  # type: ignore[no-untyped-def]
    if not os.environ.get("PJRT_DEVICE"):
        return "cpu"
    import torch_xla.runtime as xr
    from lightning.pytorch.accelerators import XLAAccelerator

    class PjrtXLA(XLAAccelerator):
        @staticmethod
        def auto_device_count() -> int:
            return xr.global_runtime_device_count()

        @staticmethod
        def is_available() -> bool:
            return xr.global_runtime_device_count() > 0

        @staticmethod
        def parse_devices(devices):  # type: ignore[no-untyped-def]
            return int(devices)

        @staticmethod
        def get_parallel_devices(devices):  # type: ignore[no-untyped-def]
            return [torch.device("xla", i) for i in range(int(devices))]

    return PjrtXLA()


L.seed_everything(1, verbose=False)
model = Net()
loader = DataLoader(TensorDataset(x, y), batch_size=a.batch, shuffle=True)
trainer = L.Trainer(max_epochs=3, accelerator=_accelerator(), devices=1,
                    accumulate_grad_batches=a.accum, gradient_clip_val=a.clip, logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False)
trainer.fit(model, loader)
model = model.cpu()
with torch.no_grad():
    print(f"accuracy {(model.net(x).argmax(1) == y).float().mean().item():.4f}")
