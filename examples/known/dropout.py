"""A model that draws random numbers every step: a two-layer MLP with dropout 0.5.

W01's one-step check compares the first step of the baseline and of an intervention. Unless
both draw the same dropout masks, their gradients differ by about as much as the masks do
(a relative 0.9 on GPT-2 with dropout 0.1), and a check whose limits were widened to cover
that passes a wrong step (a tripled learning rate) as readily as it fails a right one. The
known answer: run from the same RNG state, a no-op is "ok" and a tripled learning rate is
"MISMATCH"; neither is decided from limits widened by the masks.

    PYTHONPATH=examples perflab whatif known.dropout:make_step
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from perflab.workloads import Workload


def make_step(device, *, dim: int = 64, hidden: int = 256, classes: int = 10,
              batch: int = 32, p: float = 0.5, seed: int = 0) -> Workload:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Dropout(p),
                          nn.Linear(hidden, classes)).to(device)

    def make_batch(b: int):
        g = torch.Generator().manual_seed(seed + 1)
        return torch.randn(b, dim, generator=g), torch.randint(0, classes, (b,), generator=g)

    return Workload(
        name="dropout", model=model, make_batch=make_batch, loss_fn=F.cross_entropy,
        batch_size=batch, description=f"MLP {dim}-{hidden}-{classes}, dropout {p}",
        make_optimizer=lambda ps: torch.optim.AdamW(ps, lr=1e-3), optimizer_name="AdamW",
        params=dict(dim=dim, hidden=hidden, classes=classes, batch=batch, p=p))
