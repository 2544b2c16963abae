"""Roofline: this device's measured ceilings, and the work each phase of a step does.

"Close to the limit" needs a limit. The ceilings here are *measured* on the
device the pipeline runs on, not read from a data sheet: the best dense
matmul FLOP/s per dtype over a few square sizes, and the copy bandwidth of a
large buffer (device memory to device memory; host memcpy; host to device and
back over pinned memory on CUDA). The work of a phase is counted, not
estimated: FLOPs by ``torch.utils.flop_counter.FlopCounterMode`` (matmuls,
convolutions, attention kernels it knows; elementwise work counts 0, so a
phase's FLOPs are a lower bound) and bytes by :class:`ByteCounter`, the sum
of the sizes of every tensor each ATen operator reads and writes (views move
nothing and are skipped). The byte count is the traffic of the unfused
operators: a fused kernel that keeps intermediates in registers moves less,
and tensors small enough to stay in cache never reach memory (a small phase
can show more than 100% of the memory bandwidth).

A phase's achieved fraction is its counted work over its measured time, set
against the ceiling: FLOP/s over the matmul ceiling of the contract's dtype,
bytes/s over the memory bandwidth, and the roofline fraction (achieved FLOP/s
over min(peak, intensity x bandwidth), the attainable rate at the phase's
arithmetic intensity).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from perflab.core import names
from perflab.instruments import precision, timing


def _register_cpu_attention_flops() -> None:
    """Count the CPU fused attention kernel as the flop counter counts the CUDA ones.

    ``torch.utils.flop_counter`` knows SDPA's flash / memory-efficient / cuDNN
    kernels but not ``_scaled_dot_product_flash_attention_for_cpu``: without
    this a transformer's attention would count 0 FLOPs on a CPU.
    """
    from torch.utils import flop_counter as fc

    fwd = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    bwd = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu_backward", None)
    needed = ("register_flop_formula", "flop_registry", "sdpa_flop_count",
              "sdpa_backward_flop_count")
    if fwd is None or bwd is None or not all(hasattr(fc, n) for n in needed):
        return
    if fwd not in fc.flop_registry:
        @fc.register_flop_formula(fwd)
        def _fwd(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
            return fc.sdpa_flop_count(query_shape, key_shape, value_shape)
    if bwd not in fc.flop_registry:
        @fc.register_flop_formula(bwd)
        def _bwd(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None,
                 **kwargs) -> int:
            return fc.sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape,
                                               value_shape)


_register_cpu_attention_flops()

#: operators that allocate without reading or writing data worth counting
_NO_TRAFFIC = {
    "aten::empty",
    "aten::empty_like",
    "aten::empty_strided",
    "aten::detach",
    "aten::alias",
    "aten::lift_fresh",
}


def _nbytes(tree: Any) -> int:
    leaves, _ = tree_flatten(tree)
    return sum(t.numel() * t.element_size() for t in leaves if isinstance(t, torch.Tensor))


def _crosses_devices(args: Any, out: Any) -> bool:
    leaves = [t for t in tree_flatten((args, out))[0] if isinstance(t, torch.Tensor)]
    return len({t.device for t in leaves}) > 1


class ByteCounter(TorchDispatchMode):
    """Sum of the bytes of every tensor each ATen op reads (inputs) and writes (outputs).

    A copy between devices (host to device) counts its bytes once: they cross
    the link once, and the link is the ceiling such a copy is set against.
    """

    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not getattr(func, "is_view", False) and func._schema.name not in _NO_TRAFFIC:
            if _crosses_devices((args, kwargs), out):
                self.bytes += _nbytes(out)
            else:
                self.bytes += _nbytes((args, kwargs)) + _nbytes(out)
            self.ops += 1
        return out


@dataclass
class Work:
    """What one call did: FLOPs counted by the flop counter, bytes moved, ATen ops run, and
    the FLOPs by the precision they ran in (:mod:`perflab.instruments.precision`)."""

    flops: int
    bytes: int
    ops: int
    by_precision: dict[str, int] = field(default_factory=dict)

    def __add__(self, other: Work) -> Work:
        mix = Counter(self.by_precision)
        mix.update(other.by_precision)
        return Work(self.flops + other.flops, self.bytes + other.bytes, self.ops + other.ops,
                    dict(mix))


def count(fn: Callable[[], Any]) -> tuple[Work, Any]:
    """Run ``fn`` once under the FLOP and byte counters; (its work, its return value)."""
    flops = precision.PrecisionFlops()
    with flops, ByteCounter() as moved:
        out = fn()
    return Work(int(flops.get_total_flops()), int(moved.bytes), moved.ops,
                dict(flops.by_precision)), out


class _PhaseWork:
    """A :mod:`perflab.instruments.phases` listener: the counters' totals read at each boundary."""

    def __init__(self, flops: precision.PrecisionFlops, moved: ByteCounter):
        self.flops, self.moved = flops, moved
        self.phase: str | None = None
        self.work: dict[str, Work] = {}
        self._at = Work(0, 0, 0)

    def _now(self) -> Work:
        return Work(int(self.flops.get_total_flops()), self.moved.bytes, self.moved.ops,
                    dict(self.flops.by_precision))

    def enter(self, phase: str | None) -> None:
        now = self._now()
        if self.phase is not None:
            done = Work(now.flops - self._at.flops, now.bytes - self._at.bytes,
                        now.ops - self._at.ops,
                        {p: f - self._at.by_precision.get(p, 0)
                         for p, f in now.by_precision.items()
                         if f - self._at.by_precision.get(p, 0)})
            self.work[self.phase] = self.work.get(self.phase, Work(0, 0, 0)) + done
        self.phase, self._at = phase, now


def step_work(step) -> dict[str, Work]:
    """The work of each phase of one steady-state step (optimizer state exists), by phase
    name (:data:`perflab.instruments.phases.PHASES`; R01 reads :data:`perflab.experiments.r01_roofline.WORK_PHASES`).

    ``step`` is a :class:`perflab.instruments.steps.Step`; its phases are read from the
    hooks of :mod:`perflab.instruments.phases`, so an opaque step is counted as the
    chapter's is. One uncounted step runs first so the optimizer's state is
    allocated, as in every step after the first.
    """
    return counted_step(step)[0]


def counted_step(step) -> tuple[dict[str, Work], dict]:
    """:func:`step_work`, and the step's forward convolutions
    ({:class:`perflab.instruments.convolution.ConvCall`: FLOPs of all its calls})."""
    from perflab.instruments import phases

    step()
    listener = _PhaseWork(precision.PrecisionFlops(), ByteCounter())
    with listener.flops, listener.moved:
        phases.observe(step, listener)
    return ({ph: listener.work.get(ph, Work(0, 0, 0)) for ph in phases.PHASES},
            dict(listener.flops.convs))


# ------------------------------------------------------------------ ceilings


def inner_count(fn: Callable[[], Any], target_ms: float, sync: timing.Sync) -> int:
    """How many back-to-back calls of ``fn`` last about ``target_ms`` (at least 1)."""
    fn()
    sync()
    one = min(timing.time_calls(fn, warmup=0, repeats=3, sync=sync))
    return max(1, min(10_000, math.ceil(target_ms / max(one, 1e-6))))


def per_call_ms(fn: Callable[[], Any], *, target_ms: float, repeats: int,
                sync: timing.Sync) -> tuple[list[float], int]:
    """ms per call of ``fn``: each sample is ``inner`` calls synchronized only at both ends."""
    inner = inner_count(fn, target_ms, sync)

    def block():
        for _ in range(inner):
            fn()

    samples = timing.time_calls(block, warmup=1, repeats=repeats, sync=sync)
    return [s / inner for s in samples], inner


def matmul_op(n: int, dtype: torch.dtype, device: torch.device) -> Callable[[], Any]:
    # drawn on the device itself (seeded): on one host thread, drawing two 8192 x 8192
    # matrices on the host and copying them took longer than timing their matmul
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, generator=g, device=device).to(dtype=dtype)
    b = torch.randn(n, n, generator=g, device=device).to(dtype=dtype)
    c = torch.empty(n, n, device=device, dtype=dtype)
    return lambda: torch.mm(a, b, out=c)


def copy_op(kind: str, nbytes: int, device: torch.device) -> tuple[Callable[[], Any], int]:
    """(the copy, bytes it moves per call). Kinds: host_memcpy, device_to_device,
    host_to_device, device_to_host (pinned host memory for the last two)."""
    n = max(1, nbytes // 4)
    if kind == "host_memcpy":
        src, dst = torch.ones(n), torch.empty(n)
        return (lambda: dst.copy_(src)), 2 * 4 * n  # read + write
    if kind == "device_to_device":
        src = torch.ones(n, device=device)
        dst = torch.empty(n, device=device)
        return (lambda: dst.copy_(src)), 2 * 4 * n
    # pinned buffers allocated pinned: ``.pin_memory()`` of a pageable buffer would fill
    # and copy a second buffer of the same size first
    if kind == "host_to_device":
        src = torch.ones(n, pin_memory=True)
        dst = torch.empty(n, device=device)
        return (lambda: dst.copy_(src, non_blocking=True)), 4 * n  # across the link once
    if kind == "device_to_host":
        src = torch.ones(n, device=device)
        dst = torch.empty(n, pin_memory=True)
        return (lambda: dst.copy_(src, non_blocking=True)), 4 * n
    raise ValueError(f"unknown copy kind {kind!r}")


def fractions(work: Work, ms: float, peak_flops: float, bandwidth: float) -> dict[str, float]:
    """Achieved rates of ``work`` done in ``ms`` and their fractions (%) of the ceilings."""
    s = ms / 1e3
    achieved_flops = work.flops / s if s > 0 else 0.0
    achieved_bw = work.bytes / s if s > 0 else 0.0
    intensity = work.flops / work.bytes if work.bytes else 0.0
    attainable = min(peak_flops, intensity * bandwidth) if work.flops else 0.0
    return {
        names.ACHIEVED_FLOPS: achieved_flops,
        names.ACHIEVED_BANDWIDTH: achieved_bw,
        names.ARITHMETIC_INTENSITY: intensity,
        names.FLOPS_FRACTION: 100 * achieved_flops / peak_flops if peak_flops else 0.0,
        names.BANDWIDTH_FRACTION: 100 * achieved_bw / bandwidth if bandwidth else 0.0,
        # at zero intensity the attainable FLOP rate is 0: the bytes are the limit
        names.ROOFLINE_FRACTION: (100 * achieved_flops / attainable if attainable
                                else 100 * achieved_bw / bandwidth if bandwidth else 0.0),
    }
