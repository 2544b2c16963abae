"""A step that synchronizes inside its loss, by construction: masks and a host NaN check.

The loss is class-balanced: for each class it selects that class's rows by boolean mask
(``logits[keep]``, ``y[keep]``: a data-dependent shape, so the host must read how many rows
were kept — a device-to-host copy and a stream synchronize each) and adds their
cross-entropy; then it checks the loss for NaN on the host (``if torch.isnan(loss):``, a
read). Each sync drains the device's queue and the host cannot run ahead of it; the trunk
before the loss is device-heavy, so the host first waits for it, and the per-class work
after each sync is too small to keep the device busy. On a CPU there is no device queue:
the same code synchronizes with nothing.

The mechanism's fix: a loss of fixed shape on the device (weights from the mask instead of
selecting by it) and the NaN check as a device-side flag read every N steps.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from bottlenecks import host_batches, sized
from perflab.workloads import Workload

SIZES = {"cuda": dict(dim=2048, depth=6, batch=1024, classes=32, batches=4),
         "cpu": dict(dim=64, depth=2, batch=64, classes=8, batches=2)}


def class_balanced_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    total = logits.new_zeros(())
    for c in range(logits.shape[1]):
        keep = y == c
        rows = logits[keep]  # boolean-mask select: the host reads the count (a sync)
        if rows.shape[0]:
            total = total + F.cross_entropy(rows, y[keep], reduction="sum")  # and again
    loss = total / y.numel()
    if torch.isnan(loss):  # a NaN guard read on the host (a sync)
        raise FloatingPointError("the loss is NaN")
    return loss


def make_step(device, *, dim=None, depth=None, batch=None, classes=None, batches=None,
              seed: int = 0) -> Workload:
    s = sized(device, SIZES, dict(dim=dim, depth=depth, batch=batch, classes=classes,
                                  batches=batches))
    device = torch.device(device)
    torch.manual_seed(seed)
    layers = []
    for _ in range(s["depth"]):
        layers += [nn.Linear(s["dim"], s["dim"]), nn.GELU()]
    model = nn.Sequential(*layers, nn.Linear(s["dim"], s["classes"])).to(device)

    def make_batch(b: int, k: int = 0):
        g = torch.Generator().manual_seed(seed * 1000 + k)
        return (torch.randn(b, s["dim"], generator=g),
                torch.randint(0, s["classes"], (b,), generator=g))

    loader = host_batches(make_batch, s["batch"], s["batches"], device)
    return Workload(
        name="syncing_loss", model=model, loader=loader, make_batch=make_batch,
        loss_fn=class_balanced_loss, batch_size=s["batch"],
        description=f"MLP d{s['dim']}x{s['depth']}, a class-balanced loss over "
                    f"{s['classes']} classes by boolean mask, NaN check on the host",
        make_optimizer=lambda p: torch.optim.AdamW(p, lr=1e-4), optimizer_name="AdamW",
        params=s)
