"""Workloads: the chapter's controlled models, and the door for a user's own.

A workload is everything one training step needs, built with fixed seeds:
a model on the device, a batch factory (host tensors, so host-to-device can
be measured), a loss and an optimizer factory. Experiments never build models
themselves; they ask :func:`build` for a workload by name, and a name is
either a registered builder (``mlp``, ``pointwise``, ``attention``) or a
user's ``package.module:function`` with the same contract::

    def make_workload(device: torch.device, **params) -> perflab.workloads.Workload

so a user's model is measured by exactly the rules the chapter's model is.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

Tensor = torch.Tensor


class WorkloadError(ValueError):
    """A workload target that cannot be resolved or breaks the contract.

    ``param`` names the offending parameter when one is to blame.
    """

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


@dataclass
class Workload:
    """One controlled training step's ingredients.

    ``make_batch(batch_size)`` returns host (CPU) tensors ``(x, y)`` drawn from a
    fixed-seed generator; ``loss_fn(output, y)`` returns a scalar;
    ``make_optimizer(params)`` returns a fresh optimizer, or is ``None`` for a
    workload with nothing to optimize (experiments that need a step then write
    ``unsupported`` rows).
    """

    name: str
    model: nn.Module
    make_batch: Callable[[int], tuple[Tensor, Tensor | None]]
    loss_fn: Callable[[Tensor, Tensor | None], Tensor]
    batch_size: int
    description: str
    make_optimizer: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer] | None = None
    optimizer_name: str = "none"
    dtype: torch.dtype = torch.float32
    params: dict[str, Any] = field(default_factory=dict)

    def batch_on(self, device: torch.device | str, batch_size: int | None = None):
        x, y = self.make_batch(batch_size or self.batch_size)
        return x.to(device), (y.to(device) if y is not None else None)

    def input_shape(self, batch_size: int | None = None) -> str:
        x, _ = self.make_batch(batch_size or self.batch_size)
        return "[" + ", ".join(str(s) for s in x.shape) + "]"

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.model.parameters())


# --------------------------------------------------------------------------- models


class MLP(nn.Module):
    """The chapter's GEMM-bound classifier: depth x (Linear dim->dim, GELU), then a head."""

    def __init__(self, dim: int = 1536, depth: int = 12, num_classes: int = 1000):
        super().__init__()
        layers: list[nn.Module] = []
        for _ in range(depth):
            layers += [nn.Linear(dim, dim), nn.GELU()]
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.body(x))


class PointwiseChain(nn.Module):
    """No large matmul: depth x (tanh, scale, shift, subtract the row mean, sigmoid).

    Hundreds of small elementwise kernels in eager mode; the workload on which
    a fusing compiler has something to fuse.
    """

    def __init__(self, dim: int = 4096, depth: int = 40):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(depth, dim))
        self.shift = nn.Parameter(torch.zeros(depth, dim))
        self.depth = depth

    def forward(self, x: Tensor) -> Tensor:
        for i in range(self.depth):
            x = torch.tanh(x) * self.scale[i] + self.shift[i]
            x = torch.sigmoid(x - x.mean(dim=-1, keepdim=True))
        return x


class Attention(nn.Module):
    """Scaled dot-product attention over a stacked ``[3, B, H, T, Dh]`` q/k/v tensor.

    ``impl='manual'`` materializes the ``[B, H, T, T]`` scores and weights (the
    chapter's Chapter-10 implementation); ``impl='sdpa'`` calls
    ``F.scaled_dot_product_attention``, which may dispatch to a fused kernel.
    """

    def __init__(self, impl: str = "manual"):
        super().__init__()
        if impl not in ("manual", "sdpa"):
            raise WorkloadError(f"attention impl must be 'manual' or 'sdpa', got {impl!r}")
        self.impl = impl

    def forward(self, qkv: Tensor) -> Tensor:
        q, k, v = qkv.unbind(0)
        if self.impl == "sdpa":
            return F.scaled_dot_product_attention(q, k, v)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        return scores.softmax(dim=-1) @ v


# --------------------------------------------------------------------------- builders


def _generator(seed: int) -> torch.Generator:
    return torch.Generator(device="cpu").manual_seed(seed)


def _adamw(lr: float, impl: str):
    if impl not in ("foreach", "fused", "forloop"):
        raise WorkloadError(f"optimizer impl must be foreach, fused or forloop, got {impl!r}")

    def make(params):
        kw = {"foreach": impl == "foreach"}
        if impl == "fused":
            kw = {"fused": True}
        return torch.optim.AdamW(params, lr=lr, **kw)

    return make


def mlp(
    device: torch.device,
    *,
    dim: int = 1536,
    depth: int = 12,
    num_classes: int = 1000,
    batch: int = 256,
    lr: float = 1e-3,
    optimizer: str = "foreach",
    seed: int = 0,
) -> Workload:
    """The chapter's controlled workload: MLP dim 1536, depth 12, 1000 classes, AdamW."""
    torch.manual_seed(seed)
    model = MLP(dim, depth, num_classes).to(device)

    def make_batch(b: int):
        g = _generator(seed + 1)
        return torch.randn(b, dim, generator=g), torch.randint(0, num_classes, (b,), generator=g)

    return Workload(
        name="mlp",
        model=model,
        make_batch=make_batch,
        loss_fn=F.cross_entropy,
        batch_size=batch,
        description=f"MLP dim{dim} depth{depth}",
        make_optimizer=_adamw(lr, optimizer),
        optimizer_name=f"AdamW({optimizer})",
        params=dict(dim=dim, depth=depth, num_classes=num_classes, batch=batch, lr=lr),
    )


def pointwise(
    device: torch.device, *, dim: int = 4096, depth: int = 40, batch: int = 256, seed: int = 0
) -> Workload:
    """The chapter's pointwise chain (dim 4096, 40 layers, batch 256)."""
    torch.manual_seed(seed)
    model = PointwiseChain(dim, depth).to(device)

    def make_batch(b: int):
        g = _generator(seed + 1)
        x = torch.randn(b, dim, generator=g)
        return x, torch.rand(b, dim, generator=g)

    return Workload(
        name="pointwise",
        model=model,
        make_batch=make_batch,
        loss_fn=F.mse_loss,
        batch_size=batch,
        description=f"pointwise chain dim{dim} depth{depth}",
        make_optimizer=_adamw(1e-3, "foreach"),
        optimizer_name="AdamW(foreach)",
        params=dict(dim=dim, depth=depth, batch=batch),
    )


def attention(
    device: torch.device,
    *,
    batch: int = 4,
    heads: int = 8,
    head_dim: int = 64,
    seq: int = 1024,
    impl: str = "manual",
    seed: int = 0,
) -> Workload:
    """The attention micro-benchmark: B=4, H=8, Dh=64, sequence length T."""
    model = Attention(impl).to(device)

    def make_batch(b: int):
        g = _generator(seed + 1)
        return torch.randn(3, b, heads, seq, head_dim, generator=g), None

    def loss(out: Tensor, _y: Tensor | None) -> Tensor:
        return out.float().square().mean()

    return Workload(
        name="attention",
        model=model,
        make_batch=make_batch,
        loss_fn=loss,
        batch_size=batch,
        description=f"attention {impl} B{batch} H{heads} T{seq} Dh{head_dim}",
        params=dict(batch=batch, heads=heads, head_dim=head_dim, seq=seq, impl=impl),
    )


REGISTRY: dict[str, Callable[..., Workload]] = {
    "mlp": mlp,
    "pointwise": pointwise,
    "attention": attention,
}


def resolve_target(target: str) -> Callable[..., Workload]:
    """A registered builder name or ``package.module:function`` -> the builder."""
    if target in REGISTRY:
        return REGISTRY[target]
    if ":" not in target:
        raise WorkloadError(
            f"unknown workload {target!r}: use one of {sorted(REGISTRY)} "
            "or 'package.module:function'"
        )
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise WorkloadError(f"workload target {target!r} must look like 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # missing, or broken while importing (SyntaxError, ...)
        raise WorkloadError(
            f"workload target {target!r}: cannot import {module_name!r} "
            f"({type(exc).__name__}: {exc})"
        ) from exc
    if not hasattr(module, attr):
        raise WorkloadError(f"workload target {target!r}: module {module_name!r} has no {attr!r}")
    fn = getattr(module, attr)
    if not callable(fn):
        raise WorkloadError(f"workload target {target!r}: {attr!r} is not callable")
    return fn


def cast(w: Workload, dtype: torch.dtype) -> Workload:
    """The same workload with parameters and floating inputs in ``dtype``."""
    if dtype == w.dtype:
        return w
    w.model.to(dtype)
    make = w.make_batch

    def make_batch(b: int):
        x, y = make(b)
        x = x.to(dtype) if x.is_floating_point() else x
        y = y.to(dtype) if y is not None and y.is_floating_point() else y
        return x, y

    w.make_batch = make_batch
    w.dtype = dtype
    return w


def check_params(target: str, params: dict[str, Any]) -> None:
    """Raise if ``params`` names an argument the builder does not take."""
    import inspect

    fn = resolve_target(target)
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values()):
        return
    accepted = {n for n, p in sig.parameters.items() if p.kind is not inspect.Parameter.POSITIONAL_ONLY}
    accepted.discard("device")
    unknown = sorted(set(params) - accepted)
    if unknown:
        raise WorkloadError(
            f"workload {target!r} takes no parameter {unknown[0]!r} "
            f"(it takes: {', '.join(sorted(accepted))})",
            param=unknown[0],
        )


def build(target: str, device: torch.device | str, **params: Any) -> Workload:
    """Build a workload on ``device`` and check it honours the contract."""
    fn = resolve_target(target)
    w = fn(torch.device(device), **params)
    if not isinstance(w, Workload):
        raise WorkloadError(
            f"workload target {target!r} returned {type(w).__name__}, "
            "expected perflab.workloads.Workload"
        )
    batch = w.make_batch(w.batch_size)
    if not (isinstance(batch, tuple) and len(batch) == 2 and isinstance(batch[0], Tensor)):
        raise WorkloadError(
            f"workload {target!r}: make_batch must return (x, y) with x a tensor, "
            f"got {type(batch).__name__}"
        )
    return w
