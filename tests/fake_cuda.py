"""A fake CUDA allocator for exercising the CUDA branches of the memory experiments on a CPU.

It does not measure anything: ``allocated`` is the bytes of the tensors the
step's objects hold according to a caller-supplied function, or a counter.
Tests built on it assert that the CUDA code paths run, write rows that obey
the contract and record what they must (e.g. an OOM as a row) — never a
memory number.
"""

from __future__ import annotations

import itertools

import torch

from perflab import memory


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
    """Make ``perflab.memory`` and torch.cuda's memory calls answer from a FakeAllocator."""
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
