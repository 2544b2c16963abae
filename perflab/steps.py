"""The callables the chapter times, built from a workload.

"How fast is the model?" is four questions (forward under inference_mode,
forward with grad, forward + backward, full training step); each is a
zero-argument callable here so every timing instrument can take any of them.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from perflab.vocabulary import PHASES, STEP_PHASES  # noqa: F401 (re-exported)
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


def phased_train_step(
    model: torch.nn.Module,
    w: Workload,
    opt: torch.optim.Optimizer,
    get_batch: Callable[[], tuple[torch.Tensor, torch.Tensor | None]],
    device: torch.device,
    sync: Callable[[], None] | None,
) -> Callable[[], dict[str, float]]:
    """One training step with a clock read at each phase boundary; returns ms per phase.

    With ``sync`` (the device's synchronize), the queue is drained before each
    clock read, so each phase is charged for its own device work: the chapter's
    forensic decomposition. With ``sync=None`` the same brackets read the clock
    at submission, and the first host read of a device value (``logging``:
    ``float(loss)``) absorbs the backlog of everything still queued.
    """
    drain = sync or (lambda: None)
    clock = time.perf_counter

    def step() -> dict[str, float]:
        t0 = clock()
        x_host, y_host = get_batch()
        drain()
        t1 = clock()
        x = x_host.to(device, non_blocking=True)
        y = y_host.to(device, non_blocking=True) if y_host is not None else None
        drain()
        t2 = clock()
        opt.zero_grad(set_to_none=True)
        out = model(x)
        drain()
        t3 = clock()
        loss = w.loss_fn(out, y)
        drain()
        t4 = clock()
        loss.backward()
        drain()
        t5 = clock()
        opt.step()
        drain()
        t6 = clock()
        float(loss.detach())  # the host reads the loss: a sync whether asked for or not
        t7 = clock()
        ts = (t0, t1, t2, t3, t4, t5, t6, t7)
        return {p: (ts[i + 1] - ts[i]) * 1e3 for i, p in enumerate(PHASES)}

    return step


def phase_samples(step: Callable[[], dict[str, float]], repeats: int) -> dict[str, list[float]]:
    """Per-phase ms samples over ``repeats`` calls of a :func:`phased_train_step`."""
    out: dict[str, list[float]] = {p: [] for p in PHASES}
    for _ in range(repeats):
        for phase, ms in step().items():
            out[phase].append(ms)
    return out


def plain_train_step(
    model: torch.nn.Module,
    w: Workload,
    opt: torch.optim.Optimizer,
    get_batch: Callable[[], tuple[torch.Tensor, torch.Tensor | None]],
    device: torch.device,
) -> Callable[[], None]:
    """The same seven operations as :func:`phased_train_step`, with no clock or sync inside.

    The uninstrumented total the phase sum is checked against.
    """

    def step() -> None:
        x_host, y_host = get_batch()
        x = x_host.to(device, non_blocking=True)
        y = y_host.to(device, non_blocking=True) if y_host is not None else None
        opt.zero_grad(set_to_none=True)
        loss = w.loss_fn(model(x), y)
        loss.backward()
        opt.step()
        float(loss.detach())

    return step


def ranged_train_step(
    model: torch.nn.Module,
    w: Workload,
    opt: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor | None,
) -> Callable[[], torch.Tensor]:
    """The training step with a ``record_function`` range per phase, for the profiler."""
    from torch.profiler import record_function

    def step():
        with record_function("forward"):
            out = model(x)
        with record_function("loss"):
            loss = w.loss_fn(out, y)
        with record_function("backward"):
            loss.backward()
        with record_function("optimizer"):
            opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    return step
