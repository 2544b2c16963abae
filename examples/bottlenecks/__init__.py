"""Workloads whose bottleneck is known by construction: each tests the verdict (`perflab diagnose`).

Each module's ``make_step(device, **sizes)`` returns a :class:`perflab.workloads.Workload`
built so that one mechanism sets its pace; its sizes default to ones that show it on the
device it is built for (a CUDA GPU, or a small CPU: :func:`sized`). From the repository root:

    PYTHONPATH=examples perflab diagnose bottlenecks.slow_loader:make_step

| module | built so that | verdict (CUDA) | verdict (a CPU) |
| --- | --- | --- | --- |
| ``slow_loader`` | every example costs a fixed CPU decode, in the loader's process | input pipeline | input pipeline |
| ``syncing_loss`` | the loss selects by boolean mask per class and checks for NaN on the host | synchronization | not synchronization: no device queue |
| ``many_params`` | hundreds of small parameter tensors, AdamW(foreach=False) | optimizer | optimizer |
| ``tiny_kernels`` | a deep stack of tiny layers: every kernel shorter than its launch | host launch & Python overhead | the same, from the roofline (no device queue) |
| ``elementwise`` | large elementwise chains, no matmul | memory bandwidth | memory bandwidth |
| ``big_matmuls`` | large square matmuls | device compute | device compute |
| ``recompiling`` | torch.compile(dynamic=False) fed a new sequence length each step | the compiler | the compiler |

tests/test_bottlenecks.py runs the verdict on each on the CPU; on an H200 each gave its CUDA
verdict above (the README's table has the evidence each cited).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch


def sized(device: torch.device | str, sizes: Mapping[str, Mapping[str, Any]],
          given: Mapping[str, Any]) -> dict[str, Any]:
    """``sizes["cuda"]`` or ``sizes["cpu"]`` by the device's type, with ``given`` (not None) over it."""
    kind = "cuda" if torch.device(device).type == "cuda" else "cpu"
    return {**sizes[kind], **{k: v for k, v in given.items() if v is not None}}


def host_batches(make_batch, batch: int, count: int, device: torch.device | str) -> list:
    """``count`` batches ``make_batch(batch, k)`` held on the host, pinned when ``device`` is
    CUDA: the step's upload is then an asynchronous copy at full speed. From pageable memory
    it runs at a fraction of it (6.6 against 54 GB/s on an H200), and a large batch's upload
    becomes the step's bottleneck whatever the example was built to show."""
    pin = torch.device(device).type == "cuda"
    return [tuple(t.pin_memory() if pin else t for t in make_batch(batch, k))
            for k in range(count)]


def regression_batch(features: int, seed: int):
    """``make_batch(b)`` for a regression on ``features``: the same (input, target) pair of
    standard normals every call (a fixed batch, so each step does the same work)."""
    def make_batch(b: int):
        g = torch.Generator().manual_seed(seed + 1)
        return torch.randn(b, features, generator=g), torch.randn(b, features, generator=g)

    return make_batch
