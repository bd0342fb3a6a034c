"""A tiny GPT-2 trained by the HF Trainer (issue 37.5: the real library). The model comes from
a config and the data is made here: nothing is downloaded. --cpu keeps the CPU (the GPU
script where it runs); without it the Trainer takes torch_xla's device where PJRT_DEVICE is
set (the port). Wrong ports through TrainingArguments: --max-norm, --accum."""
import argparse
import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--cpu", action="store_true")
p.add_argument("--max-norm", type=float, default=1.0)
p.add_argument("--accum", type=int, default=1)
a = p.parse_args()

gen = torch.Generator().manual_seed(3)
seqs = torch.randint(0, 64, (512, 16), generator=gen)
seqs[:, 1::2] = (seqs[:, 0::2] * 7 + 3) % 64  # a learnable pattern


class Data(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return seqs.shape[0]

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": seqs[i], "labels": seqs[i]}


torch.manual_seed(1)
model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2))
with tempfile.TemporaryDirectory() as out:
    args = TrainingArguments(output_dir=out, per_device_train_batch_size=16, num_train_epochs=2,
                             learning_rate=1e-3, max_grad_norm=a.max_norm,
                             gradient_accumulation_steps=a.accum, optim="adamw_torch",
                             report_to=[], save_strategy="no", logging_strategy="no",
                             use_cpu=a.cpu, seed=1, data_seed=1, dataloader_drop_last=True,
                             disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=Data())
    result = trainer.train()
print(f"final_loss {result.training_loss:.5f}")
