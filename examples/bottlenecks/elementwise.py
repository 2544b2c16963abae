"""Memory-bandwidth-bound by construction: large elementwise chains, no matmul.

Each of ``depth`` layers scales, shifts and rectifies a large activation
(``batch`` x ``features``): every operation reads and writes the whole tensor and does a
few flops per element, so bytes, not arithmetic, set the time. The parameters are
vectors, so the optimizer's traffic is small beside the activations'.

On CUDA the batch is pinned and its target is one value per row, so its upload (about
1 ms of a 10 ms step on an H200) stays small beside the chain: with a full-size target
from pageable memory the upload itself was 90% of the step, and the verdict rightly said
"input" (measured on an H200: 537 MB copied per step at 6.6 GB/s).

The mechanism's fix: fuse the chain (torch.compile: one pass over memory instead of one
per operation) and keep activations in a narrower dtype.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from bottlenecks import host_batches, sized
from perflab.workloads import Workload

SIZES = {"cuda": dict(features=65536, depth=24, batch=256, batches=2),
         "cpu": dict(features=16384, depth=3, batch=32, batches=2)}


class Elementwise(nn.Module):
    def __init__(self, features: int, depth: int):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(depth, features))
        self.shift = nn.Parameter(torch.zeros(depth, features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for scale, shift in zip(self.scale, self.shift):
            x = torch.relu(x * scale + shift)
        return x


def row_mean_mse(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean squared error of each row's mean against its target (one value per row)."""
    return F.mse_loss(out.mean(1), y)


def make_step(device, *, features=None, depth=None, batch=None, batches=None,
              seed: int = 0) -> Workload:
    s = sized(device, SIZES, dict(features=features, depth=depth, batch=batch, batches=batches))
    device = torch.device(device)
    torch.manual_seed(seed)
    model = Elementwise(s["features"], s["depth"]).to(device)

    def make_batch(b: int, k: int = 0):
        g = torch.Generator().manual_seed(seed * 1000 + k)
        return torch.randn(b, s["features"], generator=g), torch.randn(b, generator=g)

    loader = host_batches(make_batch, s["batch"], s["batches"], device)
    return Workload(
        name="elementwise", model=model, loader=loader, make_batch=make_batch,
        loss_fn=row_mean_mse, batch_size=s["batch"],
        description=f"{s['depth']} elementwise layers (scale, shift, ReLU) on "
                    f"{s['batch']}x{s['features']}",
        make_optimizer=lambda p: torch.optim.AdamW(p, lr=1e-3), optimizer_name="AdamW",
        params=s)
