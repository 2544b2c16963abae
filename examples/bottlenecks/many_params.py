"""Optimizer-bound by construction: hundreds of small parameter tensors, one at a time.

The model is one Linear layer plus ``count`` small bias vectors (as a model of many
LayerNorms, embeddings or adapters has); forward and backward touch them in one stacked
operation, while ``AdamW(foreach=False)`` updates them one tensor at a time in Python,
several operations each — the optimizer's per-parameter cost is most of the step.

The mechanism's fix: one kernel per group (``AdamW(fused=True)`` or ``foreach=True``).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from bottlenecks import regression_batch, sized
from perflab.workloads import Workload

# count 512 made a 50 ms step on an H200 (the optimizer 52 ms of it, synchronized): 128
# keeps the optimizer most of the step at a quarter of the diagnosis's time
SIZES = {"cuda": dict(features=256, count=128, batch=256),
         "cpu": dict(features=32, count=256, batch=16)}


class ManyBiases(nn.Module):
    def __init__(self, features: int, count: int):
        super().__init__()
        self.proj = nn.Linear(features, features)
        self.biases = nn.ParameterList(nn.Parameter(torch.zeros(features)) for _ in range(count))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x) + torch.stack(tuple(self.biases)).sum(0)


def make_step(device, *, features=None, count=None, batch=None, seed: int = 0) -> Workload:
    s = sized(device, SIZES, dict(features=features, count=count, batch=batch))
    torch.manual_seed(seed)
    model = ManyBiases(s["features"], s["count"]).to(device)

    return Workload(
        name="many_params", model=model, make_batch=regression_batch(s["features"], seed),
        loss_fn=F.mse_loss, batch_size=s["batch"],
        description=f"Linear {s['features']} + {s['count']} bias vectors, AdamW one tensor "
                    "at a time",
        make_optimizer=lambda p: torch.optim.AdamW(p, lr=1e-3, foreach=False),
        optimizer_name="AdamW(foreach=False)", params=s)
