"""Fakes of CUDA for exercising the CUDA branches on a CPU.

:class:`FakeAllocator` does not measure anything: ``allocated`` is the bytes of
the tensors the step's objects hold according to a caller-supplied function,
or a counter. Tests built on it assert that the CUDA code paths run, write
rows that obey the contract and record what they must (e.g. an OOM as a row)
— never a memory number.

:class:`FakeCudaClock` gives the device-time instruments events and a
device-side sleep on the fake asynchronous device of tests/conftest.py: an
event fires when the device's in-order queue reaches it, so events around a
call on an idle queue span the host's launch gaps exactly as CUDA's do.
"""

from __future__ import annotations

import itertools
import time

import torch

from perflab.instruments import memory


class FakeAllocator:
    def __init__(self) -> None:
        self._tick = itertools.count()
        self.allocated = 100.0
        self.peak = 100.0
        self.reserved = 128.0
        self.max_reserved = 128.0

    def counters(self, device=None) -> memory.CudaCounters:
        # allocated moves a little on every read, so deltas and slopes are defined
        self.allocated = 100.0 + next(self._tick) % 7
        self.peak = max(self.peak, self.allocated + 3.0)
        self.max_reserved = max(self.max_reserved, self.reserved)
        return memory.CudaCounters(self.allocated, self.reserved, self.peak, self.max_reserved)

    def reset(self, device=None) -> None:
        self.peak = self.allocated


def patch(monkeypatch, *modules) -> FakeAllocator:
    """Make ``perflab.instruments.memory`` and torch.cuda's memory calls answer from a FakeAllocator."""
    fake = FakeAllocator()
    monkeypatch.setattr(memory, "cuda_counters", fake.counters)
    monkeypatch.setattr(memory, "reset_cuda_peaks", fake.reset)
    monkeypatch.setattr(memory, "nvml_process_used_mib",
                        lambda device=None: (None, "fake allocator: no NVML"))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", lambda f, d=None: None)

    class Props:
        total_memory = 141 * 1024**3

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d=None: Props())
    return fake


def as_cuda(measure):
    """``measure`` with the Context told it is on CUDA (its tensors stay on the CPU)."""

    def wrapped(ctx):
        ctx.is_cuda = True
        return measure(ctx)

    return wrapped


class FakeEvent:
    """A CUDA event on the fake device: it fires (takes the time) when the queue reaches it."""

    def __init__(self, device) -> None:
        self.device = device
        self.t: float | None = None

    def record(self) -> None:
        self.t = None
        self.device.mark(self._fire)

    def _fire(self) -> None:
        self.t = time.perf_counter()

    def query(self) -> bool:
        return self.t is not None

    def synchronize(self) -> None:
        self.device.synchronize()

    def elapsed_time(self, end: "FakeEvent") -> float:
        return (end.t - self.t) * 1e3


class FakeCudaClock:
    """What :func:`perflab.instruments.timing.time_wall_and_device` asks of CUDA, on a FakeAsyncDevice."""

    def __init__(self, device) -> None:
        self.device = device
        self.sleeps_ms: list[float] = []

    def event(self) -> FakeEvent:
        return FakeEvent(self.device)

    def sleep(self, ms: float) -> None:
        self.sleeps_ms.append(ms)
        self.device.submit(ms / 1e3)

    def sync(self) -> None:
        self.device.synchronize()
