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


def trainable(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The parameters an optimizer should hold: those that require a gradient (frozen ones not)."""
    return [p for p in model.parameters() if p.requires_grad]


def step_gradients(step) -> list[torch.Tensor | None]:
    """The gradients ``step`` leaves on its model's parameters when its optimizer step begins.

    ``step`` (a :class:`perflab.instruments.steps.Step`) runs once with an ``SGD(lr=0)``
    optimizer of its own (the parameters do not move); a global optimizer step
    pre-hook copies every parameter's gradient (None where it has none: frozen,
    or unused in the forward) — after any unscaling a GradScaler does, before
    the update. A step that makes no optimizer step (a GradScaler that skipped
    it) raises :class:`perflab.instruments.workloads.NotApplicable`.
    """
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    from perflab.instruments.workloads import NotApplicable

    model = step.model
    params = trainable(model)
    if not params:
        raise NotApplicable("the model has no parameter that requires a gradient")
    captured: list[list[torch.Tensor | None]] = []

    def copy_grads(_opt, _args, _kwargs):
        if not captured:
            captured.append([None if p.grad is None else p.grad.detach().clone()
                             for p in model.parameters()])

    handle = register_optimizer_step_pre_hook(copy_grads)
    try:
        step.train_step(model, torch.optim.SGD(params, lr=0.0), step.next_batch())
    finally:
        handle.remove()
    if not captured:
        raise NotApplicable("the step made no optimizer step (a GradScaler may have skipped "
                            "it): no gradients to step from")
    return captured[0]


def set_gradients(model: torch.nn.Module, grads: list[torch.Tensor | None]) -> None:
    """Put copies of ``grads`` (from :func:`step_gradients`) on ``model``'s parameters."""
    for p, g in zip(model.parameters(), grads, strict=True):
        p.grad = None if g is None else g.clone()


def one_step_agreement(
    model: torch.nn.Module,
    grads: list[torch.Tensor | None],
    make_a: OptimizerFactory,
    make_b: OptimizerFactory,
) -> dict[str, float]:
    """One step of optimizer A and one of B from identical state and identical gradients.

    ``grads`` (one per parameter of ``model``, None where it has none; see
    :func:`step_gradients`) are copied onto two deep copies of ``model``, each
    stepped by its optimizer over its trainable parameters. Returns the max abs
    difference between the two updated parameter sets, the parameter scale
    (mean |p| before the step) and the update scale (mean |Δp| of A), so a
    difference can be read against what it is a difference of.
    """
    model_a = copy.deepcopy(model)
    model_b = copy.deepcopy(model)
    set_gradients(model_a, grads)
    set_gradients(model_b, grads)
    before = [p.detach().clone() for p in model_a.parameters()]
    opt_a, opt_b = make_a(trainable(model_a)), make_b(trainable(model_b))
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


def resolved_impl(opt: torch.optim.Optimizer) -> str:
    """How ``opt`` runs its update: fused, foreach or for-loop (torch's default resolved)."""
    d = opt.defaults
    if d.get("fused"):
        return "fused"
    if d.get("foreach") is None and "foreach" in d:
        # torch's default: foreach when every parameter is on CUDA, else the for-loop
        on_cuda = all(p.is_cuda for g in opt.param_groups for p in g["params"])
        return "foreach" if on_cuda else "forloop"
    return "foreach" if d.get("foreach") else "forloop"
