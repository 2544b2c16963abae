"""Workloads shaped like real models rather than the chapter's MLP, one per awkward case.

Each ``awkward_workloads:<case>`` is a builder of the workload contract
(``make(device, **params)``), small enough for the tiny contract:

- ``unused_head``: a second head never called in forward (parameters that get no gradient);
- ``frozen``: the first layer frozen (``requires_grad=False``);
- ``param_groups``: AdamW over two groups (decay on weights, none on biases and norms);
- ``buffers``: BatchNorm's running statistics and a registered buffer;
- ``tuple_output``: the model returns ``(logits, features)``, the loss picks;
- ``dict_output``: the model returns ``{"logits": ..., "aux": ...}``, the loss picks;
- ``token_ids``: integer inputs through an embedding;
- ``all_cases``: every case above in one model;
- ``own_step``: ``all_cases`` with only a loader (a list of dict batches) and a
  ``train_step`` of its own: no ``make_batch``, no ``loss_fn``.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from perflab.instruments.workloads import Workload

VOCAB, CLASSES = 32, 5


class Awkward(nn.Module):
    """Token ids -> embedding -> [frozen] linear -> BatchNorm -> head; options toggle each case."""

    def __init__(self, width: int, *, tokens: bool, frozen: bool, unused_head: bool,
                 norm: bool, output: str):
        super().__init__()
        self.tokens = tokens
        self.inp = nn.Embedding(VOCAB, width) if tokens else nn.Linear(width, width)
        self.body = nn.Linear(width, width)
        if frozen:
            self.body.requires_grad_(False)
        self.norm = nn.BatchNorm1d(width) if norm else nn.Identity()
        self.register_buffer("scale", torch.full((width,), 0.5))
        self.head = nn.Linear(width, CLASSES)
        self.unused = nn.Linear(width, CLASSES) if unused_head else None  # never called
        self.output = output

    def forward(self, x: torch.Tensor):
        h = self.inp(x)
        if self.tokens:
            h = h.mean(dim=1)
        h = self.norm(torch.tanh(self.body(h))) * self.scale
        logits = self.head(h)
        if self.output == "tuple":
            return logits, h
        if self.output == "dict":
            return {"logits": logits, "aux": h.pow(2).mean()}
        return logits


def _logits(out):
    if isinstance(out, dict):
        return out["logits"]
    return out[0] if isinstance(out, tuple) else out


def _loss(out, y):
    return F.cross_entropy(_logits(out), y)


def _groups(params):
    params = list(params)
    decay = [p for p in params if p.ndim >= 2]
    rest = [p for p in params if p.ndim < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                              {"params": rest, "weight_decay": 0.0}], lr=1e-3)


def _build(device, name, *, width=16, batch=8, seed=0, tokens=False, frozen=False,
           unused_head=False, norm=False, output="tensor", groups=False) -> Workload:
    torch.manual_seed(seed)
    model = Awkward(width, tokens=tokens, frozen=frozen, unused_head=unused_head, norm=norm,
                    output=output).to(device)

    def make_batch(b: int):
        g = torch.Generator().manual_seed(seed + 1)
        x = (torch.randint(0, VOCAB, (b, 6), generator=g) if tokens
             else torch.randn(b, width, generator=g))
        return x, torch.randint(0, CLASSES, (b,), generator=g)

    make_opt = _groups if groups else (lambda p: torch.optim.AdamW(p, lr=1e-3))
    return Workload(name=name, model=model, make_batch=make_batch, loss_fn=_loss,
                    batch_size=batch, description=f"awkward {name} w{width}",
                    make_optimizer=make_opt, optimizer_name="AdamW",
                    params=dict(width=width, batch=batch))


def unused_head(device, **kw):
    return _build(device, "unused_head", unused_head=True, **kw)


def frozen(device, **kw):
    return _build(device, "frozen", frozen=True, **kw)


def param_groups(device, **kw):
    return _build(device, "param_groups", groups=True, **kw)


def buffers(device, **kw):
    return _build(device, "buffers", norm=True, **kw)


def tuple_output(device, **kw):
    return _build(device, "tuple_output", output="tuple", **kw)


def dict_output(device, **kw):
    return _build(device, "dict_output", output="dict", **kw)


def token_ids(device, **kw):
    return _build(device, "token_ids", tokens=True, **kw)


def all_cases(device, **kw):
    return _build(device, "all_cases", tokens=True, frozen=True, unused_head=True, norm=True,
                  output="dict", groups=True, **kw)


def own_step(device, *, batch=8, **kw):
    """``all_cases`` through a loader of dict batches and a train_step of its own."""
    w = all_cases(device, batch=batch, **kw)
    batches = [{"tokens": x, "label": y} for x, y in (w.make_batch(batch) for _ in range(3))]
    device = torch.device(device)

    def train_step(model, optimizer, batch):
        tokens, label = batch["tokens"].to(device), batch["label"].to(device)
        optimizer.zero_grad(set_to_none=True)
        out = model(tokens)
        loss = _loss(out, label) + 0.01 * out["aux"]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss

    return Workload(name="own_step", model=w.model, loader=batches, train_step=train_step,
                    batch_size=batch, description="awkward own_step",
                    make_optimizer=_groups, optimizer_name="AdamW(2 groups)")


CASES = ("unused_head", "frozen", "param_groups", "buffers", "tuple_output", "dict_output",
         "token_ids", "all_cases", "own_step")
