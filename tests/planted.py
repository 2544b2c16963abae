"""Workloads and interventions whose effect is known by construction, for W01's tests.

``slow_optimizer_mlp`` is the tiny MLP trained by an AdamW that sleeps ``sleep_ms`` in every
step unless it runs fused: the real ``fused_optimizer`` intervention then removes a known
cost. The interventions below change the step in ways whose verdict is known: none at all,
a sleep added, a learning rate tripled (a wrong result, whatever its speed), a failure.
"""

from __future__ import annotations

import time

import torch

from perflab.experiments.w01_whatif import whatif
from perflab.instruments import workloads


class SleepyAdamW(torch.optim.AdamW):
    """AdamW whose unfused step sleeps first: an optimizer bound by a cost fusing removes."""

    sleep_ms = 4.0

    def step(self, closure=None):
        if not self.defaults.get("fused"):
            time.sleep(self.sleep_ms / 1e3)
        return super().step(closure)


def slow_optimizer_mlp(device, *, dim: int = 32, depth: int = 2, batch: int = 16,
                       seed: int = 0) -> workloads.Workload:
    w = workloads.mlp(device, dim=dim, depth=depth, num_classes=10, batch=batch, seed=seed)
    w.make_optimizer = lambda ps: SleepyAdamW(ps, lr=1e-3, foreach=True)
    w.optimizer_name = "SleepyAdamW(foreach)"
    return w


def _sleep_more(parts):
    run = parts.run

    def slower(batch):
        time.sleep(SleepyAdamW.sleep_ms / 1e3)
        return run(batch)

    parts.run = slower
    return parts


def _triple_lr(parts):
    for g in parts.optimizer.param_groups:
        g["lr"] *= 3
    return parts


def _fail(parts):
    raise RuntimeError("planted: the compiler failed")


NOOP = whatif.Intervention("noop", "no change at all", {}, "same arithmetic", ("optimizer",))
SLOWER = whatif.Intervention("sleep_added", "a sleep before every step", {}, "same arithmetic",
                             custom=_sleep_more)
WRONG = whatif.Intervention("wrong_lr", "the learning rate tripled", {}, "same arithmetic",
                            ("optimizer",), custom=_triple_lr)
BROKEN = whatif.Intervention("broken", "a change that fails to build", {}, "reordered",
                             custom=_fail)


#: a generator outside every model's state (a copy of the model shares it) and every seed
#: of torch's: it stands for what no RNG state fixes (atomics' order, a time-based seed)
_OUTSIDE = torch.Generator().manual_seed(1234)


class _Jitter(torch.nn.Module):
    """Scales its input by 1 + 1e-2 noise from :data:`_OUTSIDE`: the step differs from
    itself from the same state, batch and RNG state."""

    def forward(self, x):
        return x * (1 + 1e-2 * torch.randn(x.shape[-1], generator=_OUTSIDE).to(x.device))


def unrepeatable_mlp(device, *, dim: int = 32, batch: int = 16, seed: int = 0
                     ) -> workloads.Workload:
    """The tiny MLP with a :class:`_Jitter` in front: a step that is not repeatable."""
    w = workloads.mlp(device, dim=dim, depth=1, num_classes=10, batch=batch, seed=seed)
    w.model = torch.nn.Sequential(_Jitter(), w.model)
    return w
