"""The callables the chapter times, built from a workload.

"How fast is the model?" is four questions (forward under inference_mode,
forward with grad, forward + backward, full training step); each is a
zero-argument callable here so every timing instrument can take any of them.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from perflab.workloads import Workload


def forward_inference(model: torch.nn.Module, x: torch.Tensor) -> Callable[[], object]:
    def step():
        with torch.inference_mode():
            return model(x)

    return step


def forward_grad(model: torch.nn.Module, x: torch.Tensor) -> Callable[[], object]:
    def step():
        return model(x)

    return step


def forward_backward(
    model: torch.nn.Module, w: Workload, x: torch.Tensor, y: torch.Tensor | None
) -> Callable[[], object]:
    params = [p for p in model.parameters() if p.requires_grad]

    def step():
        for p in params:
            p.grad = None
        loss = w.loss_fn(model(x), y)
        loss.backward()
        return loss

    return step


def train_step(
    model: torch.nn.Module,
    w: Workload,
    opt: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor | None,
) -> Callable[[], torch.Tensor]:
    """zero_grad(set_to_none) -> forward -> loss -> backward -> optimizer step."""

    def step():
        opt.zero_grad(set_to_none=True)
        loss = w.loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return step
