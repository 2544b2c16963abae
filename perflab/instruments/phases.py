"""The phases of a training step, read from hooks: the user's code is never edited.

A step (:class:`perflab.instruments.steps.Step`) is opaque: ``train_step(model, optimizer,
batch)`` may do anything (AMP, a GradScaler, clipping, logging). Its phase
boundaries are observed from outside while it runs:

- ``input_wait``: the loader's ``next()``;
- ``host_to_device``: from the batch's arrival to the model's first forward
  pre-hook — the copies the step issues before its forward (and whatever else
  it does first: ``zero_grad``, entering autocast);
- ``forward``: the top module's forward pre-hook to its forward hook;
- ``loss``: the forward hook to the start of the autograd backward;
- ``backward``: ``torch.autograd.backward`` / ``torch.autograd.grad`` from
  entry to return (``loss.backward()`` and ``scaler.scale(loss).backward()``
  go through it; nested calls, e.g. reentrant checkpointing, count once);
- ``optimizer``: the global optimizer step pre-hook to the post-hook
  (``torch.optim.optimizer.register_optimizer_step_pre_hook``: any optimizer,
  also one a GradScaler steps);
- ``logging``: the rest — after backward until an optimizer step (unscaling,
  clipping), after the optimizer step until the step returns, and the host
  read of the returned loss the experiment adds, as a training loop's
  logging would.

A step that calls its model several times (micro-batches) moves through
forward/loss/backward several times; each phase's time is summed.

:class:`Boundaries` installs the hooks and calls a listener's ``enter(phase)``
at each boundary; :func:`observe` runs one step under them. Listeners:
:class:`PhaseClock` (ms per phase; with ``sync`` the device is drained at each
boundary, so each phase is charged for its own device work — the forensic
mode — and without it the clock reads submission times and the first host
read absorbs the backlog), :class:`PhaseRanges` (a ``record_function`` range
per phase, for the profiler and a trace window), and any object with
``enter`` (R01 reads its work counters at each boundary).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)

from perflab.core.names import PHASES, STEP_PHASES  # noqa: F401 (re-exported)

_clock = time.perf_counter


class Boundaries:
    """While entered, calls ``enter(phase)`` at each phase boundary of steps run on ``model``.

    Forward boundaries come from ``model``'s own forward pre/post hooks (the top
    module only; calls inside backward are recomputation and are ignored).
    """

    def __init__(self, model: torch.nn.Module, enter: Callable[[str], None]):
        self.model = model
        self.enter = enter
        self._forward_depth = 0
        self._backward_depth = 0
        self._optimizer_depth = 0
        self._handles: list[Any] = []
        self._saved: dict[str, Callable[..., Any]] = {}

    # ------------------------------------------------------------ hooks
    def _forward_pre(self, _module, _args):
        if self._backward_depth == 0:
            if self._forward_depth == 0:
                self.enter("forward")
            self._forward_depth += 1

    def _forward_post(self, _module, _args, _output):
        if self._backward_depth == 0 and self._forward_depth > 0:
            self._forward_depth -= 1
            if self._forward_depth == 0:
                self.enter("loss")

    def _optimizer_pre(self, _optimizer, _args, _kwargs):
        if self._optimizer_depth == 0:
            self.enter("optimizer")
        self._optimizer_depth += 1

    def _optimizer_post(self, _optimizer, _args, _kwargs):
        self._optimizer_depth -= 1
        if self._optimizer_depth == 0:
            self.enter("logging")

    def _autograd(self, name: str) -> Callable[..., Any]:
        original = self._saved[name]

        def wrapped(*args, **kwargs):
            self._backward_depth += 1
            if self._backward_depth == 1:
                self.enter("backward")
            try:
                return original(*args, **kwargs)
            finally:
                self._backward_depth -= 1
                if self._backward_depth == 0:
                    self.enter("logging")

        return wrapped

    # ------------------------------------------------------------ install
    def __enter__(self) -> Boundaries:
        m = self.model
        self._handles = [m.register_forward_pre_hook(self._forward_pre),
                         m.register_forward_hook(self._forward_post),
                         register_optimizer_step_pre_hook(self._optimizer_pre),
                         register_optimizer_step_post_hook(self._optimizer_post)]
        for name in ("backward", "grad"):
            self._saved[name] = getattr(torch.autograd, name)
            setattr(torch.autograd, name, self._autograd(name))
        return self

    def __exit__(self, *exc) -> None:
        for name, original in self._saved.items():
            setattr(torch.autograd, name, original)
        self._saved.clear()
        for h in self._handles:
            h.remove()
        self._handles = []


def read_loss(loss: Any) -> float:
    """The host read of a step's loss (a tensor waits for the device; a number is already read)."""
    return float(loss.detach()) if isinstance(loss, torch.Tensor) else float(loss)


def observe(step, listener, *, read: bool = False) -> Any:
    """Run one ``step`` with ``listener.enter(phase)`` at each boundary, ``enter(None)`` at the end.

    ``read``: read the returned loss on the host inside ``logging`` (E05's loop).
    Returns the step's loss.
    """
    with Boundaries(step.model, listener.enter):
        listener.enter("input_wait")
        batch = step.next_batch()
        listener.enter("host_to_device")
        loss = step.run(batch)
        listener.enter("logging")
        if read:
            read_loss(loss)
        listener.enter(None)
    return loss


class PhaseClock:
    """ms per phase of one step; with ``sync`` the device is drained before each clock read."""

    def __init__(self, sync: Callable[[], None] | None = None):
        self.drain = sync or (lambda: None)
        self.phase: str | None = None
        self.t = 0.0
        self.ms: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        #: how many times each phase was entered in the step (a boundary that never fired reads 0)
        self.entries: dict[str, int] = dict.fromkeys(PHASES, 0)

    def enter(self, phase: str | None) -> None:
        self.drain()
        t = _clock()
        if self.phase is None:  # the step starts
            self.ms = dict.fromkeys(PHASES, 0.0)
            self.entries = dict.fromkeys(PHASES, 0)
        else:
            self.ms[self.phase] += (t - self.t) * 1e3
        if phase is not None and phase != self.phase:
            self.entries[phase] += 1
        self.phase, self.t = phase, t


def timed(step, sync: Callable[[], None] | None = None, *, read: bool = True
          ) -> Callable[[], dict[str, float]]:
    """A callable running one step of ``step`` and returning ms per phase (see the module doc).

    ``read``: the host reads the returned loss inside ``logging``, as E05's loop does.
    After each call, ``.entries`` holds how often each phase was entered.
    """
    clock = PhaseClock(sync)

    def one() -> dict[str, float]:
        observe(step, clock, read=read)
        one.entries = dict(clock.entries)
        return dict(clock.ms)

    one.entries = dict(clock.entries)
    return one


def samples(phased: Callable[[], dict[str, float]], repeats: int
            ) -> tuple[dict[str, list[float]], dict[str, list[int]]]:
    """Per-phase ms samples over ``repeats`` calls of :func:`timed`, and the entries per call."""
    ms: dict[str, list[float]] = {p: [] for p in PHASES}
    entries: dict[str, list[int]] = {p: [] for p in PHASES}
    for _ in range(repeats):
        for phase, v in phased().items():
            ms[phase].append(v)
        for phase, n in phased.entries.items():
            entries[phase].append(n)
    return ms, entries


class PhaseRanges:
    """A ``torch.profiler.record_function`` range open over each phase named in ``names``."""

    def __init__(self, names: Iterable[str] = PHASES):
        self.names = set(names)
        self.phase: str | None = None
        self._range: Any = None

    def enter(self, phase: str | None) -> None:
        if phase == self.phase:
            return
        if self._range is not None:
            self._range.__exit__(None, None, None)
            self._range = None
        self.phase = phase
        if phase in self.names:
            self._range = torch.profiler.record_function(phase)
            self._range.__enter__()


def ranged(step, names: Iterable[str] = PHASES) -> Callable[[], Any]:
    """``step`` with a ``record_function`` range per phase (the profiler's view); returns the loss.

    Inductor's graph cache is off from here on in this process (a job's, whose cache is its
    own and cold anyway): a range the model's hooks open inside a compiled forward reaches the
    graph Inductor hashes for its cache, which cannot pickle the range and raised (R02 on a
    recompiling step: "Tried to serialize ... _RecordFunction"). Set once, not per call: the
    ranges' own cost is what E23 measures."""
    names = tuple(names)
    import torch._inductor.config as inductor_config

    inductor_config.fx_graph_cache = False

    def one() -> Any:
        return observe(step, PhaseRanges(names))

    return one
