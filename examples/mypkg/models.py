"""A worked example of perflab's workload contract: your model, measured by the chapter's method.

perflab calls ``make_step(device, **params)`` once per experiment, in a fresh
process, with the keys of your config entry (and ``seed`` when the function
takes it), and expects a :class:`perflab.workloads.Workload`:

- ``model``: an ``nn.Module`` already on ``device``, in float32 (the pipeline
  casts it for a bfloat16/float16 contract);
- ``make_batch(batch_size) -> (x, y)``: *host* tensors (perflab times the
  host-to-device copy itself), the same every call (a fixed-seed generator),
  ``y`` may be None;
- ``loss_fn(model(x), y)``: a scalar tensor;
- ``make_optimizer(params)``: a fresh optimizer over ``params`` (None if the
  workload has no training step: experiments that need one then write
  ``unsupported`` rows saying so);
- ``name``, ``batch_size``, ``description`` (shown in every row and the
  ledger), and optionally ``optimizer_name`` and ``params`` (for reference).

Run it (from the repository root)::

    PYTHONPATH=examples snakemake --cores 1 --config workload=mypkg.models:make_step
    PYTHONPATH=examples perflab diagnose mypkg.models:make_step
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

from perflab.workloads import Workload


class ResidualMLP(nn.Module):
    """A regression net: ``depth`` residual blocks of LayerNorm -> Linear -> SiLU -> Linear."""

    def __init__(self, features: int, width: int, depth: int):
        super().__init__()
        self.inp = nn.Linear(features, width)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(width), nn.Linear(width, 2 * width), nn.SiLU(),
                          nn.Linear(2 * width, width))
            for _ in range(depth)
        )
        self.out = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for block in self.blocks:
            h = h + block(h)
        return self.out(h).squeeze(-1)


def make_step(device, *, features: int = 64, width: int = 256, depth: int = 4,
              batch: int = 128, lr: float = 1e-3, seed: int = 0) -> Workload:
    torch.manual_seed(seed)
    model = ResidualMLP(features, width, depth).to(device)

    def make_batch(b: int):
        g = torch.Generator().manual_seed(seed + 1)  # the same batch every call
        x = torch.randn(b, features, generator=g)
        return x, x[:, :8].sum(dim=1) + 0.1 * torch.randn(b, generator=g)

    return Workload(
        name="residual_mlp",
        model=model,
        make_batch=make_batch,
        loss_fn=F.mse_loss,
        batch_size=batch,
        description=f"ResidualMLP f{features} w{width} d{depth}",
        make_optimizer=lambda params: torch.optim.AdamW(params, lr=lr, foreach=True),
        optimizer_name="AdamW(foreach)",
        params=dict(features=features, width=width, depth=depth, batch=batch, lr=lr),
    )
