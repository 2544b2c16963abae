"""Host-launch-bound by construction: a deep stack of tiny layers.

Every layer is a Linear of ``dim`` features on a batch of ``batch`` rows followed by a
tanh: each kernel does a few thousand multiply-adds, far less time on the device than the
host needs to launch it (Python, the dispatcher, the driver), so the device waits for
launches. The optimizer is SGD with ``foreach=True`` (a few kernels for all parameters),
so the optimizer is not what waits. On a CPU there is no device queue; the same step shows
as operator overhead: forward and backward far below both measured ceilings.

The mechanism's fix: fewer, larger kernels (torch.compile fuses them; CUDA graphs replay
the launches), or more work per launch (a larger batch).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from bottlenecks import regression_batch, sized
from perflab.workloads import Workload

SIZES = {"cuda": dict(dim=32, depth=64, batch=16), "cpu": dict(dim=8, depth=32, batch=4)}


def make_step(device, *, dim=None, depth=None, batch=None, seed: int = 0) -> Workload:
    s = sized(device, SIZES, dict(dim=dim, depth=depth, batch=batch))
    torch.manual_seed(seed)
    layers = []
    for _ in range(s["depth"]):
        layers += [nn.Linear(s["dim"], s["dim"]), nn.Tanh()]
    model = nn.Sequential(*layers).to(device)

    return Workload(
        name="tiny_kernels", model=model, make_batch=regression_batch(s["dim"], seed),
        loss_fn=F.mse_loss, batch_size=s["batch"],
        description=f"{s['depth']} tiny layers of {s['dim']} features, batch {s['batch']}",
        make_optimizer=lambda p: torch.optim.SGD(p, lr=1e-2, foreach=True),
        optimizer_name="SGD(foreach)", params=s)
