"""A float32 model whose own step runs forward and loss under bf16 autocast: its matmuls run
in bfloat16, not in the contract's float32.

R01 must judge its phases against the bf16 matmul ceiling (a ViT-B/16 under bf16 autocast
read 544% of the fp32 ceiling on an H200 before R01 counted FLOPs by the precision their
operands had): every phase reads at most 100% of its ceiling, and the verdict is right.

    PYTHONPATH=examples perflab diagnose known.bf16_autocast:make_step
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from perflab.workloads import Workload

SIZES = {"cuda": dict(dim=4096, depth=4, batch=4096), "cpu": dict(dim=256, depth=3, batch=128)}


def make_step(device, *, dim=None, depth=None, batch=None, seed: int = 0) -> Workload:
    device = torch.device(device)
    s = {**SIZES["cuda" if device.type == "cuda" else "cpu"],
         **{k: v for k, v in dict(dim=dim, depth=depth, batch=batch).items() if v is not None}}
    torch.manual_seed(seed)
    layers = []
    for _ in range(s["depth"]):
        layers += [nn.Linear(s["dim"], s["dim"]), nn.GELU()]
    model = nn.Sequential(*layers).to(device)
    g = torch.Generator().manual_seed(seed + 1)
    x, y = torch.randn(s["batch"], s["dim"], generator=g), torch.randn(s["batch"], s["dim"],
                                                                       generator=g)
    if device.type == "cuda":
        x, y = x.pin_memory(), y.pin_memory()

    def train_step(model, opt, batch):
        xb, yb = (t.to(device, non_blocking=True) for t in batch)
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = F.mse_loss(model(xb).float(), yb)
        loss.backward()
        opt.step()
        return loss

    return Workload(
        name="bf16_autocast", model=model, loader=[(x, y)], train_step=train_step,
        batch_size=s["batch"],
        description=f"{s['depth']} matmuls of {s['dim']}^2 under bf16 autocast, batch "
                    f"{s['batch']}",
        make_optimizer=lambda p: torch.optim.AdamW(p, lr=1e-4), optimizer_name="AdamW",
        params=s)
