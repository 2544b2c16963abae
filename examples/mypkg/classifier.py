"""A worked example of a workload that brings its own loader and its own training step.

perflab times *your* step: ``train_step(model, optimizer, batch)`` fed from
``loader``, exactly as your training loop runs them (here: a DataLoader with
worker processes and pinned memory, mixed precision with a GradScaler where
the device supports it, gradient clipping). Its phases (input wait,
host-to-device, forward, loss, backward, optimizer, the rest) are read from
hooks, so nothing below is written for perflab.

``make_batch`` and ``loss_fn`` are optional once ``loader`` and ``train_step``
are given; they are given here so the experiments that rebuild the step from
model, loss and one batch (the forward-only questions, AMP, accumulation,
memory by phase) can run too.

Run it (from the repository root)::

    PYTHONPATH=examples perflab check mypkg.classifier:make_step
    PYTHONPATH=examples perflab diagnose mypkg.classifier:make_step
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, default_collate

from perflab.workloads import Workload


class SyntheticDocuments(Dataset):
    """``size`` token sequences with a label each, made on demand from the index (a fixed seed
    per example: every epoch, every worker and every process sees the same data)."""

    def __init__(self, size: int, seq: int, vocab: int, classes: int, seed: int):
        self.size, self.seq, self.vocab, self.classes, self.seed = size, seq, vocab, classes, seed

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int):
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        tokens = torch.randint(0, self.vocab, (self.seq,), generator=g)
        return tokens, int(tokens[:4].sum()) % self.classes  # a label the model can learn


class Classifier(nn.Module):
    """Token embeddings, ``depth`` residual MLP blocks per position, mean pool, a linear head."""

    def __init__(self, vocab: int, dim: int, depth: int, classes: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 4 * dim), nn.GELU(),
                          nn.Linear(4 * dim, dim)) for _ in range(depth))
        self.head = nn.Linear(dim, classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)
        for block in self.blocks:
            h = h + block(h)
        return self.head(h.mean(dim=1))


def make_step(device, *, vocab: int = 1000, seq: int = 64, dim: int = 128, depth: int = 2,
              classes: int = 10, batch: int = 64, examples: int = 4096, workers: int = 2,
              amp: bool = True, clip: float = 1.0, lr: float = 1e-3, seed: int = 0) -> Workload:
    device = torch.device(device)
    torch.manual_seed(seed)
    model = Classifier(vocab, dim, depth, classes).to(device)
    data = SyntheticDocuments(examples, seq, vocab, classes, seed)
    loader = DataLoader(
        data, batch_size=batch, shuffle=True, drop_last=True,
        generator=torch.Generator().manual_seed(seed),  # the same order in every process
        num_workers=workers, persistent_workers=workers > 0,
        pin_memory=device.type == "cuda",
    )
    # fp16 needs a loss scaler (its narrow exponent underflows small gradients); bf16 on a
    # CPU does not, so the scaler is on only where fp16 autocast runs
    amp_dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
    scaler = torch.amp.GradScaler(device.type, enabled=amp and amp_dtype is torch.float16)

    def train_step(model, optimizer, batch):
        tokens, labels = (t.to(device, non_blocking=True) for t in batch)
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp):
            loss = F.cross_entropy(model(tokens), labels)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        scaler.step(optimizer)
        scaler.update()
        return loss.detach()

    def make_batch(b: int):
        return tuple(default_collate([data[i] for i in range(b)]))  # (tokens, labels)

    return Workload(
        name="classifier",
        model=model,
        loader=loader,
        train_step=train_step,
        make_batch=make_batch,
        loss_fn=F.cross_entropy,
        batch_size=batch,
        description=f"token classifier V{vocab} T{seq} d{dim} L{depth}"
                    + (f" AMP {str(amp_dtype).removeprefix('torch.')}" if amp else ""),
        make_optimizer=lambda params: torch.optim.AdamW(params, lr=lr),
        optimizer_name="AdamW",
        params=dict(vocab=vocab, seq=seq, dim=dim, depth=depth, classes=classes, batch=batch,
                    workers=workers, amp=amp, clip=clip, lr=lr),
    )
