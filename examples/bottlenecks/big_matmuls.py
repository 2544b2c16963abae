"""Compute-bound by construction: large square matmuls.

``depth`` Linear layers of ``dim`` x ``dim`` on a batch of ``dim``-ish rows: each matmul
does O(n^3) arithmetic on O(n^2) bytes, far above the device's ridge point, and each
kernel runs long beside its launch.

The mechanism's fix: faster math (bf16 autocast, TF32), or less work per example.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from bottlenecks import host_batches, regression_batch, sized
from perflab.workloads import Workload

SIZES = {"cuda": dict(dim=4096, depth=4, batch=2048), "cpu": dict(dim=256, depth=3, batch=256)}


def make_step(device, *, dim=None, depth=None, batch=None, seed: int = 0) -> Workload:
    s = sized(device, SIZES, dict(dim=dim, depth=depth, batch=batch))
    torch.manual_seed(seed)
    layers = []
    for _ in range(s["depth"]):
        layers += [nn.Linear(s["dim"], s["dim"]), nn.ReLU()]
    model = nn.Sequential(*layers).to(device)

    make_batch = regression_batch(s["dim"], seed)
    # pinned: from pageable memory the 64 MiB upload was a third of an H200 step
    loader = host_batches(lambda b, k: make_batch(b), s["batch"], 1, device)
    return Workload(
        name="big_matmuls", model=model, loader=loader, make_batch=make_batch,
        loss_fn=F.mse_loss, batch_size=s["batch"],
        description=f"{s['depth']} matmuls of {s['dim']}^2, batch {s['batch']}",
        make_optimizer=lambda p: torch.optim.AdamW(p, lr=1e-4), optimizer_name="AdamW",
        params=s)
