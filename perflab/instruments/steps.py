"""The callables the chapter times, built from a workload.

The training step every experiment times is :class:`Step`, built by
:func:`build`: the workload's ``train_step`` (its own, or the chapter's
:func:`perflab.instruments.workloads.default_train_step`) fed from its ``loader`` (its
own, or ``make_batch``'s batch served again and again — resident on the
device by default, as the chapter times the step; on the host where the
experiment times the copy too). Its phases come from hooks
(:mod:`perflab.instruments.phases`), so an opaque step is localized as the chapter's is.

"How fast is the model?" is four questions (forward under inference_mode,
forward with grad, forward + backward, full training step); each is a
zero-argument callable here so every timing instrument can take any of them.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from perflab.core.names import PHASES, STEP_PHASES  # noqa: F401 (re-exported)
from perflab.instruments.phases import read_loss
from perflab.instruments.workloads import (
    Workload,
    WorkloadError,
    chapter_step,
    default_train_step,
    one_pass,
)


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
    """zero_grad(set_to_none) -> forward -> loss -> backward -> optimizer step
    (:func:`perflab.instruments.workloads.chapter_step`) on ``(x, y)``."""
    loss_fn = w.loss_fn

    def step():
        return chapter_step(model, loss_fn, opt, x, y)

    return step



def device_loss(loss: Any, device: torch.device | str) -> torch.Tensor:
    """A step's loss as a float32 tensor on the device, not read on the host (a number, which
    a step that read its loss itself returns, is put back on the device)."""
    if isinstance(loss, torch.Tensor):
        return loss.detach().float()
    return torch.tensor(float(loss), device=device)


class BatchStream:
    """A loader's batches one after another; a new pass (epoch) whenever one runs dry.

    ``source`` is a re-iterable or a function returning one epoch's iterable
    (:func:`perflab.instruments.workloads.one_pass`). ``passes`` and ``drawn`` count what was
    used. A failure of the loader is a :class:`WorkloadError` naming it.
    """

    def __init__(self, source: Any):
        self.source = source
        self.passes = 0
        self.drawn = 0
        self._it: Any = None

    def _new_pass(self) -> None:
        self._it = iter(one_pass(self.source))
        self.passes += 1

    def next(self) -> Any:
        try:
            if self._it is None:
                self._new_pass()
            try:
                batch = next(self._it)
            except StopIteration:
                self._new_pass()
                batch = next(self._it, None)
                if batch is None:
                    raise WorkloadError(f"loader: pass {self.passes} yielded no batch (after "
                                        f"{self.drawn} batches)") from None
        except WorkloadError:
            raise
        except Exception as exc:
            raise WorkloadError(f"loader raised on batch {self.drawn + 1} "
                                f"({type(exc).__name__}: {exc})") from exc
        self.drawn += 1
        return batch


@dataclass
class Step:
    """One training step as the workload defines it: ``train_step(model, optimizer, batch)``
    on the next batch of its loader. Calling it runs one step and returns the loss."""

    model: torch.nn.Module
    optimizer: Any
    train_step: Callable[[torch.nn.Module, Any, Any], Any]
    batches: BatchStream
    workload: Workload

    def next_batch(self) -> Any:
        return self.batches.next()

    def run(self, batch: Any) -> Any:
        return self.train_step(self.model, self.optimizer, batch)

    def __call__(self) -> Any:
        return self.train_step(self.model, self.optimizer, self.batches.next())

    def and_read(self) -> Callable[[], float]:
        """The step followed by the host read of its loss (a loop that logs every step)."""

        def step() -> float:
            return read_loss(self())

        return step

    @property
    def own(self) -> bool:
        """Whether the step is the workload's own train_step (not the chapter's)."""
        return self.workload.train_step is not None


#: ``build(optimizer=...)`` default: a fresh optimizer from the workload's make_optimizer
FRESH = object()


def build(w: Workload, device: torch.device | str, *, model: torch.nn.Module | None = None,
          optimizer: Any = FRESH, resident: bool = True, batch_size: int | None = None,
          batches: BatchStream | None = None) -> Step:
    """The step every experiment times, for workload ``w`` on ``device``.

    ``model`` (default ``w.model``) and ``optimizer`` (default a fresh one over
    its parameters; ``None`` when the workload has none) are what the step is
    given: an experiment that swaps either passes its own. Without a loader of
    its own the workload's batch (``make_batch(batch_size)``) is served again
    and again: ``resident`` places it on the device once (the chapter's step,
    no copy in it), else it stays on the host and every step copies it.
    ``batches``: draw from another step's stream (two sides of an A/B share one
    loader: a DataLoader with persistent workers has one iterator).
    """
    model = w.model if model is None else model
    if optimizer is FRESH:
        optimizer = w.make_optimizer(model.parameters()) if w.make_optimizer else None
    if batches is not None:
        source = None
    elif w.loader is not None:
        source = w.loader
    else:
        b = batch_size or w.batch_size
        batch = w.batch_on(device, b) if resident else w.make_batch(b)
        source = itertools.repeat(batch)
    fn = w.train_step or default_train_step(w, device)
    return Step(model, optimizer, fn, batches or BatchStream(source), w)
