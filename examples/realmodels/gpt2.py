"""GPT-2 from Hugging Face transformers, trained as its model card's users train it.

GPT2LMHeadModel built from a config (no download), token batches from a DataLoader, the
user's own step: bf16 autocast on CUDA (fp32 on a CPU), the model's own shifted
cross-entropy (``labels=``), AdamW. On an H100/H200 the default (GPT-2 small, 8 x 512
tokens) steps in about 25 ms.

    PYTHONPATH=examples perflab diagnose realmodels.gpt2:make_step --budget 60s
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from bottlenecks import sized
from torch.utils.data import DataLoader, Dataset

from perflab.workloads import Workload
from realmodels import library

SIZES = {"cuda": dict(layers=12, dim=768, heads=12, vocab=50257, seq=512, batch=8),
         "cpu": dict(layers=2, dim=128, heads=4, vocab=2048, seq=64, batch=8)}


class RandomTokens(Dataset):
    """``n`` token sequences, each drawn from a generator seeded by its index (the same data in
    every process and every epoch)."""

    def __init__(self, n: int, seq: int, vocab: int, seed: int):
        self.n, self.seq, self.vocab, self.seed = n, seq, vocab, seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        return torch.randint(0, self.vocab, (self.seq,), generator=g)


def next_token_loss(output, labels: torch.Tensor) -> torch.Tensor:
    """The causal LM loss GPT2LMHeadModel computes from ``labels=``: position t predicts t+1."""
    logits = output.logits[:, :-1]
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(),
                           labels[:, 1:].reshape(-1))


def make_step(device, *, layers=None, dim=None, heads=None, vocab=None, seq=None, batch=None,
              bf16=None, lr: float = 3e-4, seed: int = 0) -> Workload:
    transformers = library("transformers", "gpt2")
    s = sized(device, SIZES, dict(layers=layers, dim=dim, heads=heads, vocab=vocab, seq=seq,
                                  batch=batch))
    device = torch.device(device)
    bf16 = device.type == "cuda" if bf16 is None else bf16
    torch.manual_seed(seed)
    config = transformers.GPT2Config(n_layer=s["layers"], n_embd=s["dim"], n_head=s["heads"],
                                     vocab_size=s["vocab"], n_positions=s["seq"],
                                     bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(config).to(device)
    data = RandomTokens(4096, s["seq"], s["vocab"], seed)
    loader = DataLoader(data, batch_size=s["batch"], shuffle=False, drop_last=True,
                        pin_memory=device.type == "cuda")

    def train_step(model, optimizer, ids):
        ids = ids.to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        return loss.detach()

    def make_batch(b: int):
        ids = torch.stack([data[i] for i in range(b)])
        return ids, ids

    return Workload(
        name="gpt2", model=model, loader=loader, train_step=train_step, make_batch=make_batch,
        loss_fn=next_token_loss, batch_size=s["batch"],
        description=f"GPT-2 L{s['layers']} d{s['dim']} V{s['vocab']}, {s['batch']} x {s['seq']} "
                    f"tokens" + (" bf16 autocast" if bf16 else ""),
        make_optimizer=lambda ps: torch.optim.AdamW(ps, lr=lr), optimizer_name="AdamW",
        params={**s, "bf16": bf16, "lr": lr})
