"""Memory-bandwidth-bound by construction: large elementwise chains, no matmul.

Each of ``depth`` layers scales, shifts and rectifies a large activation
(``batch`` x ``features``): every operation reads and writes the whole tensor and does a
few flops per element, so bytes, not arithmetic, set the time. The parameters are
vectors, so the optimizer's traffic is small beside the activations'.

The mechanism's fix: fuse the chain (torch.compile: one pass over memory instead of one
per operation) and keep activations in a narrower dtype.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from bottlenecks import regression_batch, sized
from perflab.workloads import Workload

SIZES = {"cuda": dict(features=65536, depth=6, batch=1024),
         "cpu": dict(features=16384, depth=3, batch=32)}


class Elementwise(nn.Module):
    def __init__(self, features: int, depth: int):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(depth, features))
        self.shift = nn.Parameter(torch.zeros(depth, features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for scale, shift in zip(self.scale, self.shift):
            x = torch.relu(x * scale + shift)
        return x


def make_step(device, *, features=None, depth=None, batch=None, seed: int = 0) -> Workload:
    s = sized(device, SIZES, dict(features=features, depth=depth, batch=batch))
    torch.manual_seed(seed)
    model = Elementwise(s["features"], s["depth"]).to(device)

    return Workload(
        name="elementwise", model=model, make_batch=regression_batch(s["features"], seed),
        loss_fn=F.mse_loss, batch_size=s["batch"],
        description=f"{s['depth']} elementwise layers (scale, shift, ReLU) on "
                    f"{s['batch']}x{s['features']}",
        make_optimizer=lambda p: torch.optim.AdamW(p, lr=1e-3), optimizer_name="AdamW",
        params=s)
