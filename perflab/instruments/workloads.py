"""Workloads: the chapter's controlled models, and the door for a user's own.

A workload is everything one training step needs, built with fixed seeds:
a model on the device, a batch factory (host tensors, so host-to-device can
be measured), a loss and an optimizer factory. Experiments never build models
themselves; they ask :func:`build` for a workload by name, and a name is
either a registered builder (``mlp``, ``pointwise``, ``attention``, ``convnet``,
``transformer``) or a user's ``package.module:function`` with the same contract::

    def make_workload(device: torch.device, **params) -> perflab.instruments.workloads.Workload

so a user's model is measured by exactly the rules the chapter's model is.

A workload may also bring its own ``loader`` (any re-iterable of host batches,
e.g. a ``torch.utils.data.DataLoader``, or a function returning one epoch's
iterable) and its own ``train_step(model, optimizer, batch) -> loss``; every
experiment that times "the step" then times that, fed from that loader
(:mod:`perflab.instruments.steps`). Without them the loader serves ``make_batch``'s batch
again and again and the step is :func:`default_train_step`, the chapter's.
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

from perflab.core.targets import WorkloadError, check_accepted

Tensor = torch.Tensor


class NotApplicable(Exception):
    """An experiment needs a part of the workload this one does not give.

    Raised by the stand-in for an absent ``make_batch`` or ``loss_fn`` (a
    workload that brings its own loader and train_step need not give them);
    the harness turns it into an ``unsupported`` row carrying the message.
    """


def _absent(field_name: str, why: str) -> Callable[..., Any]:
    """A stand-in for a field the workload does not give: calling it says which and why."""

    def missing(*_args: Any, **_kwargs: Any) -> Any:
        raise NotApplicable(f"the workload gives no {field_name} ({why}); this experiment "
                            f"rebuilds the step from model, {field_name} and make_batch")

    missing.perflab_absent = True  # type: ignore[attr-defined]
    return missing


@dataclass
class Workload:
    """One training step's ingredients (the fields are documented in the README).

    ``make_batch(batch_size)`` returns host (CPU) tensors ``(x, y)`` drawn from a
    fixed-seed generator; ``loss_fn(output, y)`` returns a scalar;
    ``make_optimizer(params)`` returns a fresh optimizer, or is ``None`` for a
    workload with nothing to optimize (experiments that need a step then write
    ``unsupported`` rows).

    ``loader`` (optional): the batches the step is fed, a re-iterable (a
    DataLoader, a list) or a zero-argument function returning one epoch's
    iterable; perflab starts a new pass whenever one runs dry. ``train_step``
    (optional): ``train_step(model, optimizer, batch) -> loss``, the user's own
    step, which copies the batch to the device itself and returns the loss (a
    scalar tensor or a number). Given both, ``make_batch`` and ``loss_fn`` may
    be omitted: the experiments that rebuild the step from them (forward-only
    questions, optimizer swaps on fixed gradients, AMP, checkpointing,
    accumulation, memory by phase) then write ``unsupported`` rows saying so.
    """

    name: str
    model: nn.Module
    make_batch: Callable[[int], tuple[Tensor, Tensor | None]] | None = None
    loss_fn: Callable[[Any, Tensor | None], Tensor] | None = None
    batch_size: int = 0
    description: str = ""
    make_optimizer: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer] | None = None
    optimizer_name: str = "none"
    dtype: torch.dtype = torch.float32
    params: dict[str, Any] = field(default_factory=dict)
    loader: Any = None
    train_step: Callable[[nn.Module, Any, Any], Any] | None = None

    def __post_init__(self) -> None:
        why = "it brings its own loader and train_step"
        if self.make_batch is None:
            self.make_batch = _absent("make_batch", why)
        if self.loss_fn is None:
            self.loss_fn = _absent("loss_fn", why)
        if not self.batch_size and isinstance(getattr(self.loader, "batch_size", None), int):
            self.batch_size = self.loader.batch_size  # a DataLoader knows its batch size
        if not self.description and isinstance(self.model, nn.Module):
            self.description = type(self.model).__name__

    def gives(self, name: str) -> bool:
        """Whether the workload gives field ``name`` (not None, not an absent stand-in)."""
        value = getattr(self, name)
        return value is not None and not getattr(value, "perflab_absent", False)

    def batch_on(self, device: torch.device | str, batch_size: int | None = None):
        x, y = self.make_batch(batch_size or self.batch_size)
        return x.to(device), (y.to(device) if y is not None else None)

    def input_shape(self, batch_size: int | None = None) -> str:
        """The shape of the model's input (the loader's first tensor when it has no make_batch)."""
        if self.gives("make_batch"):
            x, _ = self.make_batch(batch_size or self.batch_size)
            return _shape(x)
        if not hasattr(self, "_first_shape"):
            self._first_shape = _shape(first_tensor(first_batch(self.loader)))
        return self._first_shape

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.model.parameters())


def _shape(t: Tensor | None) -> str:
    return "[]" if t is None else "[" + ", ".join(str(s) for s in t.shape) + "]"


def _is_iterable(obj: Any) -> bool:
    # asked of the type, not by calling iter(): a DataLoader's iter() starts its workers and
    # draws from its generator, so asking would shift the order of the batches it then yields
    return isinstance(obj, Iterable) or hasattr(type(obj), "__getitem__")


def one_pass(loader: Any) -> Iterable[Any]:
    """One epoch of ``loader``: itself when iterable, else what calling it returns."""
    if not _is_iterable(loader) and callable(loader):
        return loader()
    return loader


def first_batch(loader: Any) -> Any:
    """The first batch of a fresh pass over ``loader`` (None when it yields none)."""
    return next(iter(one_pass(loader)), None)


def tensors_in(batch: Any) -> list[Any]:
    """The leaves of a batch (tuples, lists, dicts nested), in order."""
    if isinstance(batch, dict):
        return [leaf for v in batch.values() for leaf in tensors_in(v)]
    if isinstance(batch, (tuple, list)):
        return [leaf for v in batch for leaf in tensors_in(v)]
    return [batch]


def first_tensor(batch: Any) -> Tensor | None:
    return next((t for t in tensors_in(batch) if isinstance(t, Tensor)), None)


def chapter_step(model: nn.Module, loss_fn: Callable[..., Tensor],
                 optimizer: torch.optim.Optimizer, x: Tensor, y: Tensor | None) -> Tensor:
    """The chapter's training step on a batch already where the model is: zero_grad
    (set_to_none), forward, loss, backward, optimizer step; returns the loss. Written once:
    the step every experiment times (:func:`perflab.instruments.steps.train_step`) and the
    default ``train_step`` of a workload (:func:`default_train_step`) are this."""
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


def default_train_step(w: Workload, device: torch.device | str):
    """The chapter's step as a ``train_step``: copy ``(x, y)`` to the device (non_blocking),
    zero_grad(set_to_none), loss_fn(model(x), y), backward, optimizer step; returns the loss.

    On a batch already on the device the copies are no-ops, so the step is exactly
    the one the chapter times (zero_grad, forward, loss, backward, step).
    """
    device = torch.device(device)

    def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, batch: Any) -> Tensor:
        x, y = batch
        x = x.to(device, non_blocking=True)
        y = y.to(device, non_blocking=True) if y is not None else None
        return chapter_step(model, w.loss_fn, optimizer, x, y)

    return train_step


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


class ConvNet(nn.Module):
    """A small image classifier: three conv-BN-ReLU stages (the last two stride 2), pool, head."""

    def __init__(self, channels: int = 64, num_classes: int = 10):
        super().__init__()
        c = channels

        def stage(cin: int, cout: int, stride: int) -> list[nn.Module]:
            return [nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False),
                    nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]

        self.body = nn.Sequential(*stage(3, c, 1), *stage(c, 2 * c, 2), *stage(2 * c, 4 * c, 2),
                                  nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(4 * c, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.body(x))


class Block(nn.Module):
    """One pre-norm transformer block: causal self-attention (SDPA) and a 4x GELU MLP."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        if dim % heads:
            raise WorkloadError(f"transformer dim {dim} is not a multiple of heads {heads}",
                                param="heads")
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                           v.transpose(1, 2), is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    """A small causal language model: token + position embeddings, ``depth`` blocks, LM head."""

    def __init__(self, vocab: int, dim: int, heads: int, depth: int, seq: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(seq, dim)
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(depth)])
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx: Tensor) -> Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        return self.head(self.ln(self.blocks(self.tok(idx) + self.pos(pos))))


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


def _trained_with_adamw(name, model, make_batch, loss_fn, batch, description, lr, optimizer,
                        params) -> Workload:
    return Workload(name=name, model=model, make_batch=make_batch, loss_fn=loss_fn,
                    batch_size=batch, description=description,
                    make_optimizer=_adamw(lr, optimizer), optimizer_name=f"AdamW({optimizer})",
                    params={**params, "lr": lr})


def convnet(
    device: torch.device,
    *,
    channels: int = 64,
    image: int = 32,
    num_classes: int = 10,
    batch: int = 256,
    lr: float = 1e-3,
    optimizer: str = "foreach",
    seed: int = 0,
) -> Workload:
    """A small convolutional classifier on ``image`` x ``image`` RGB inputs, AdamW."""
    torch.manual_seed(seed)
    model = ConvNet(channels, num_classes).to(device)

    def make_batch(b: int):
        g = _generator(seed + 1)
        return (torch.randn(b, 3, image, image, generator=g),
                torch.randint(0, num_classes, (b,), generator=g))

    return _trained_with_adamw(
        "convnet", model, make_batch, F.cross_entropy, batch, f"ConvNet c{channels} {image}x{image}",
        lr, optimizer, dict(channels=channels, image=image, num_classes=num_classes, batch=batch),
    )


def transformer(
    device: torch.device,
    *,
    vocab: int = 8192,
    dim: int = 512,
    heads: int = 8,
    depth: int = 2,
    seq: int = 256,
    batch: int = 32,
    lr: float = 3e-4,
    optimizer: str = "foreach",
    seed: int = 0,
) -> Workload:
    """A small causal transformer LM (``depth`` pre-norm blocks), next-token loss, AdamW."""
    torch.manual_seed(seed)
    model = TinyLM(vocab, dim, heads, depth, seq).to(device)

    def make_batch(b: int):
        g = _generator(seed + 1)
        tokens = torch.randint(0, vocab, (b, seq + 1), generator=g)
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    def loss(logits: Tensor, y: Tensor | None) -> Tensor:
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))

    return _trained_with_adamw(
        "transformer", model, make_batch, loss, batch,
        f"TinyLM d{dim} h{heads} L{depth} T{seq} V{vocab}", lr, optimizer,
        dict(vocab=vocab, dim=dim, heads=heads, depth=depth, seq=seq, batch=batch),
    )


REGISTRY: dict[str, Callable[..., Workload]] = {
    "mlp": mlp,
    "pointwise": pointwise,
    "attention": attention,
    "convnet": convnet,
    "transformer": transformer,
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


def _cast_floats(batch: Any, dtype: torch.dtype) -> Any:
    """``batch`` with every floating tensor in ``dtype`` (tuples, lists, dicts kept)."""
    if isinstance(batch, Tensor):
        return batch.to(dtype) if batch.is_floating_point() else batch
    if isinstance(batch, dict):
        return {k: _cast_floats(v, dtype) for k, v in batch.items()}
    if isinstance(batch, (tuple, list)) and not hasattr(batch, "_fields"):
        return type(batch)(_cast_floats(v, dtype) for v in batch)
    return batch


class _CastLoader:
    """A loader whose batches' floating tensors are cast to ``dtype`` (re-iterable as its source)."""

    def __init__(self, loader: Any, dtype: torch.dtype):
        self.loader, self.dtype = loader, dtype
        self.batch_size = getattr(loader, "batch_size", None)

    def __iter__(self):
        return (_cast_floats(b, self.dtype) for b in one_pass(self.loader))


def cast(w: Workload, dtype: torch.dtype) -> Workload:
    """The same workload with parameters and floating inputs in ``dtype``."""
    if dtype == w.dtype:
        return w
    w.model.to(dtype)
    if w.gives("make_batch"):
        make = w.make_batch

        def make_batch(b: int):
            return _cast_floats(make(b), dtype)

        w.make_batch = make_batch
    if w.loader is not None:
        w.loader = _CastLoader(w.loader, dtype)
    w.dtype = dtype
    return w


def _accepted(fn: Callable[..., Any]) -> set[str] | None:
    """Keyword parameters ``fn`` takes besides ``device``; None when it takes any (``**kw``)."""
    import inspect

    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values()):
        return None
    accepted = {n for n, p in sig.parameters.items() if p.kind is not inspect.Parameter.POSITIONAL_ONLY}
    accepted.discard("device")
    return accepted


def check_params(target: str, params: dict[str, Any]) -> None:
    """Raise if ``params`` names an argument the builder does not take.

    ``seed`` is exempt: the pipeline passes it only to builders that take it.
    """
    check_accepted(target, _accepted(resolve_target(target)), params)


def build(target: str, device: torch.device | str, **params: Any) -> Workload:
    """Build a workload on ``device`` and check it honours the contract.

    Any failure of the target itself (an exception in the builder, a return
    value that is not a :class:`Workload`, fields of the wrong kind, a batch
    factory that raises or returns the wrong shape) is a :class:`WorkloadError`
    naming ``target``. The model is not run here (that would warm the device
    before an experiment's first-step measurement): :func:`check` runs it.
    """
    fn = resolve_target(target)
    accepted = _accepted(fn)
    if accepted is not None and "seed" not in accepted:
        params.pop("seed", None)
    try:
        w = fn(torch.device(device), **params)
    except WorkloadError as exc:
        raise WorkloadError(f"workload target {target!r}: {exc}", param=exc.param) from exc
    except Exception as exc:
        raise WorkloadError(
            f"workload target {target!r} raised while building "
            f"({type(exc).__name__}: {exc})"
        ) from exc
    if not isinstance(w, Workload):
        raise WorkloadError(
            f"workload target {target!r} returned {type(w).__name__}, "
            "expected perflab.instruments.workloads.Workload"
        )
    problems = _field_problems(w)
    if problems:
        raise WorkloadError(f"workload {target!r}: " + "; ".join(problems))
    if w.gives("make_batch"):
        _check_make_batch(target, w)
    return w


def _field_problems(w: Workload) -> list[str]:
    """What is wrong with the fields' kinds (nothing is run here)."""
    problems = []
    if not isinstance(w.model, nn.Module):
        problems.append(f"model must be a torch.nn.Module, got {type(w.model).__name__}")
    for name in ("make_batch", "loss_fn", "train_step"):
        value = getattr(w, name)
        if value is not None and not callable(value):
            problems.append(f"{name} must be callable")
    if w.make_optimizer is not None and not callable(w.make_optimizer):
        problems.append("make_optimizer must be callable or None")
    if w.loader is not None and not (_is_iterable(w.loader) or callable(w.loader)):
        problems.append(f"loader must be an iterable of batches (e.g. a DataLoader) or a "
                        f"function returning one, got {type(w.loader).__name__}")
    if w.loader is None and not w.gives("make_batch"):
        problems.append("make_batch is required unless the workload gives a loader")
    if w.train_step is None and not w.gives("loss_fn"):
        problems.append("loss_fn is required unless the workload gives a train_step")
    if not isinstance(w.batch_size, int) or isinstance(w.batch_size, bool) or w.batch_size < 1:
        problems.append(f"batch_size must be a positive int, got {w.batch_size!r}")
    return problems


def _check_make_batch(target: str, w: Workload) -> None:
    try:
        batch = w.make_batch(w.batch_size)
    except Exception as exc:
        raise WorkloadError(
            f"workload {target!r}: make_batch({w.batch_size}) raised ({type(exc).__name__}: {exc})"
        ) from exc
    if not (isinstance(batch, tuple) and len(batch) == 2 and isinstance(batch[0], Tensor)
            and (batch[1] is None or isinstance(batch[1], Tensor))):
        raise WorkloadError(
            f"workload {target!r}: make_batch must return (x, y) with x a tensor, "
            f"got {type(batch).__name__}"
        )


def _describe(obj: Any) -> str:
    kind = type(obj)
    return kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__name__}"


def _batch_problem(batch: Any) -> str:
    """Why ``batch`` cannot feed a step ('' when it can): no tensor in it, or arrays uncollated."""
    leaves = tensors_in(batch)
    arrays = [leaf for leaf in leaves if type(leaf).__module__ == "numpy"]
    if arrays:
        return (f"yields {_describe(arrays[0])} in its batches: collate them into tensors "
                "(torch.utils.data.default_collate does)")
    if not any(isinstance(leaf, Tensor) for leaf in leaves):
        return (f"yields a batch with no tensor ({_describe(batch)} of "
                f"{', '.join(sorted({_describe(v) for v in leaves})) or 'nothing'}): "
                "collate the examples into tensors")
    return ""


def check_loader(target: str, w: Workload) -> Any:
    """The loader's first batch, after checking it can feed every experiment.

    A loader that raises, yields nothing or no tensor, is a one-shot iterator
    (perflab starts a new pass whenever one runs dry, so it must be re-iterable
    or a function returning one epoch), or whose second pass is empty is a
    :class:`WorkloadError` naming ``loader``.
    """
    where = f"workload {target!r}: loader"
    if _is_iterable(w.loader) and iter(w.loader) is w.loader:
        raise WorkloadError(f"{where} is a one-shot iterator ({_describe(w.loader)}): perflab "
                            "starts a new pass over the loader whenever one runs dry, so give "
                            "a re-iterable (a DataLoader, a list) or a function returning one "
                            "epoch's iterable")
    batches = []
    for n in (1, 2):
        try:
            batches.append(first_batch(w.loader))
        except Exception as exc:
            raise WorkloadError(f"{where} raised on the first batch of pass {n} "
                                f"({type(exc).__name__}: {exc})") from exc
        if batches[-1] is None:
            raise WorkloadError(f"{where} yielded no batch on pass {n}: perflab starts a new "
                                "pass whenever one runs dry, and each must yield batches")
    problem = _batch_problem(batches[0])
    if problem:
        raise WorkloadError(f"{where} {problem}")
    return batches[0]


def check_loss(target: str, what: str, loss: Any) -> None:
    """A loss must be a scalar tensor (or, from a train_step, a number)."""
    if isinstance(loss, Tensor) and loss.dim() == 0:
        return
    if what == "train_step" and isinstance(loss, (int, float)) and not isinstance(loss, bool):
        return
    if loss is None:
        raise WorkloadError(f"workload {target!r}: {what} returned None: it must return the "
                            "loss (a scalar tensor)")
    got = str(list(loss.shape)) if isinstance(loss, Tensor) else _describe(loss)
    raise WorkloadError(f"workload {target!r}: {what} must return a scalar tensor, "
                        f"got {got}")


def _phase(target: str, name: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as exc:
        raise WorkloadError(
            f"workload {target!r}: the {name} raised ({type(exc).__name__}: {exc})"
        ) from exc


def check(target: str, device: torch.device | str = "cpu", **params: Any) -> Workload:
    """Build ``target`` and run one training step; return the workload.

    The pre-flight of ``perflab check`` / ``perflab diagnose``, before any
    measurement: a model whose forward, loss, backward or optimizer step
    raises, or whose loss is not a scalar (on a 2-example batch of
    ``make_batch``); a loader that raises, runs dry or yields no tensors; a
    ``train_step`` that raises or returns no scalar loss — each a
    :class:`WorkloadError` naming the target and the field or phase.
    """
    w = build(target, device, **params)
    if w.gives("make_batch") and w.gives("loss_fn"):
        _check_model_and_loss(target, w, device)
    if w.loader is not None or w.train_step is not None:
        _check_step(target, w, device)
    return w


def _check_model_and_loss(target: str, w: Workload, device: torch.device | str) -> None:
    x, y = w.batch_on(device, min(2, w.batch_size))
    out = _phase(target, "model's forward", lambda: w.model(x))
    loss = _phase(target, "loss_fn", lambda: w.loss_fn(out, y))
    check_loss(target, "loss_fn", loss)
    if w.make_optimizer is not None and w.train_step is None:
        _phase(target, "backward", loss.backward)
        opt = _phase(target, "make_optimizer", lambda: w.make_optimizer(w.model.parameters()))
        _phase(target, "optimizer step", opt.step)
    w.model.zero_grad(set_to_none=True)


def _check_step(target: str, w: Workload, device: torch.device | str) -> None:
    """The step the experiments time, once: the loader's first batch through train_step."""
    if w.loader is not None:
        batch = check_loader(target, w)
    else:
        batch = w.make_batch(w.batch_size)
    if w.train_step is None:
        if not (isinstance(batch, (tuple, list)) and len(batch) == 2
                and isinstance(batch[0], Tensor)):
            raise WorkloadError(f"workload {target!r}: loader must yield (x, y) batches for the "
                                "default step (loss_fn(model(x), y)), or give a train_step "
                                f"that takes its batches; got {_describe(batch)}")
        if w.make_optimizer is None:
            return
    opt = None
    if w.make_optimizer is not None:
        opt = _phase(target, "make_optimizer", lambda: w.make_optimizer(w.model.parameters()))
    step = w.train_step or default_train_step(w, device)
    what = "train_step" if w.train_step is not None else "default step"
    loss = _phase(target, what, lambda: step(w.model, opt, batch))
    check_loss(target, "train_step" if w.train_step is not None else "loss_fn", loss)
    w.model.zero_grad(set_to_none=True)
