"""The optimizer intervention: the chapter's four optimizers and the fused-vs-foreach check.

SGD and SGD with momentum are different algorithms (a change of training
dynamics); AdamW foreach and AdamW fused are one algorithm executed two ways
(a performance-only change, to be verified numerically). Both E07 and E25 use
these so the correctness column means the same thing in both tables.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable

import torch

OptimizerFactory = Callable[[Iterable[torch.nn.Parameter]], torch.optim.Optimizer]


def factory(name: str, lr: float = 1e-3) -> OptimizerFactory:
    """``sgd``, ``sgd_momentum``, ``adamw_foreach`` or ``adamw_fused`` as a factory."""
    makers: dict[str, OptimizerFactory] = {
        "sgd": lambda ps: torch.optim.SGD(ps, lr=lr),
        "sgd_momentum": lambda ps: torch.optim.SGD(ps, lr=lr, momentum=0.9),
        "adamw_foreach": lambda ps: torch.optim.AdamW(ps, lr=lr, foreach=True),
        "adamw_fused": lambda ps: torch.optim.AdamW(ps, lr=lr, fused=True),
    }
    if name not in makers:
        raise ValueError(f"unknown optimizer {name!r}; known: {sorted(makers)}")
    return makers[name]


#: which swaps change only how the update is executed, not what it is
SAME_ALGORITHM_AS = {"adamw_fused": "adamw_foreach"}


def one_step_agreement(
    model: torch.nn.Module,
    loss_fn,
    x: torch.Tensor,
    y: torch.Tensor | None,
    make_a: OptimizerFactory,
    make_b: OptimizerFactory,
) -> dict[str, float]:
    """One step of optimizer A and one of B from identical state and identical gradients.

    Returns the max abs difference between the two updated parameter sets, the
    parameter scale (mean |p| before the step) and the update scale (mean
    |Δp| of A), so a difference can be read against what it is a difference of.
    """
    model_a = copy.deepcopy(model)
    model_b = copy.deepcopy(model)
    for m in (model_a, model_b):
        for p in m.parameters():
            p.grad = None
    # gradients computed once, then copied, so both optimizers see the same bits
    loss = loss_fn(model_a(x), y)
    loss.backward()
    for pa, pb in zip(model_a.parameters(), model_b.parameters()):
        pb.grad = pa.grad.detach().clone()
    before = [p.detach().clone() for p in model_a.parameters()]
    opt_a, opt_b = make_a(model_a.parameters()), make_b(model_b.parameters())
    opt_a.step()
    opt_b.step()
    with torch.no_grad():
        diff = max(float((pa - pb).abs().max()) for pa, pb in
                   zip(model_a.parameters(), model_b.parameters()))
        n = sum(p.numel() for p in before)
        scale = sum(float(p.abs().sum()) for p in before) / n
        update = sum(float((pa - p0).abs().sum()) for pa, p0 in
                     zip(model_a.parameters(), before)) / n
    return {"max_abs_diff": diff, "parameter_scale": scale, "update_scale": update}
