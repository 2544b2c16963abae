"""The input pipeline of E24: a DataLoader-fed training step, with its wait measured.

:class:`PreparedDataset` serves the workload's own examples (a fixed-seed
pool from its ``make_batch``) and spends a configurable amount of CPU work
preparing each one (``item_ops`` elementwise passes over the example, the
stand-in for decoding and augmentation), so that input wait is a real,
tunable cost. It lives in an importable module so DataLoader workers can
unpickle it under any multiprocessing start method.

:func:`fed_steps` runs one block of the loop and brackets each step's three
parts with the device synchronized at the boundaries: waiting for the next
batch, the host-to-device copy (``non_blocking=True``) and the compute
(forward, loss, backward, optimizer step).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch.utils.data import DataLoader, Dataset


class PreparedDataset(Dataset):
    """``length`` examples drawn in order from a pool, each prepared at a CPU cost."""

    def __init__(self, x_pool: torch.Tensor, y_pool: torch.Tensor | None, length: int,
                 item_ops: int):
        self.x_pool, self.y_pool = x_pool, y_pool
        self.length, self.item_ops = length, item_ops

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int):
        j = i % len(self.x_pool)
        x = self.x_pool[j].clone()
        scratch = x.float()
        for _ in range(self.item_ops):  # the preparation cost; the example itself is unchanged
            scratch = torch.tanh(scratch) * 1.01
        y = self.y_pool[j] if self.y_pool is not None else torch.zeros(())
        return x, y


def available_cores() -> int:
    """Cores this process may run on (its affinity), the bound on worker counts."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def loader(ds: Dataset, batch: int, workers: int, pin: bool) -> DataLoader:
    """A loader whose workers start with each iterator and stop with it (not persistent).

    Configurations timed in interleaved blocks each open a fresh iterator per
    block: an idle configuration then holds no workers preparing batches ahead
    on cores the running one needs.
    """
    kw = dict(prefetch_factor=2) if workers > 0 else {}
    return DataLoader(ds, batch_size=batch, shuffle=False, drop_last=True, num_workers=workers,
                      pin_memory=pin, **kw)


@dataclass
class FedRun:
    first_wait_ms: float  # the first batch of the first block: includes starting the workers
    wait_ms: list[float] = field(default_factory=list)
    h2d_ms: list[float] = field(default_factory=list)
    compute_ms: list[float] = field(default_factory=list)
    step_ms: list[float] = field(default_factory=list)
    block: list[int] = field(default_factory=list)  # the block of each timed step
    losses: list[float] = field(default_factory=list)  # every step's, timed or not, in order

    @property
    def wait_share(self) -> float:
        """Input wait as % of the summed step time over the timed steps."""
        return 100 * sum(self.wait_ms) / sum(self.step_ms)

    def block_medians(self) -> list[float]:
        """The median step time of each block, in block order."""
        import statistics

        blocks = sorted(set(self.block))
        return [statistics.median(t for t, b in zip(self.step_ms, self.block) if b == k)
                for k in blocks]


def fed_steps(dl: DataLoader, step: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor],
              device: torch.device, sync: Callable[[], None], *, warmup: int, steps: int,
              has_target: bool, run: FedRun | None = None, block: int = 0) -> FedRun:
    """One block: a fresh iterator, its first batch and ``warmup`` steps, then ``steps`` timed.

    The timed steps are appended to ``run`` (a new one when None) under ``block``.
    """
    clock = time.perf_counter
    it = iter(dl)
    for i in range(1 + warmup + steps):
        sync()
        t0 = clock()
        xb, yb = next(it)
        t1 = clock()
        x = xb.to(device, non_blocking=True)
        y = yb.to(device, non_blocking=True) if has_target else None
        sync()
        t2 = clock()
        loss = step(x, y)
        sync()
        t3 = clock()
        if run is None:
            run = FedRun(first_wait_ms=(t1 - t0) * 1e3)
        run.losses.append(float(loss.detach()))
        if i <= warmup:  # the first batch (workers starting) and the warmup steps: not timed
            continue
        run.wait_ms.append((t1 - t0) * 1e3)
        run.h2d_ms.append((t2 - t1) * 1e3)
        run.compute_ms.append((t3 - t2) * 1e3)
        run.step_ms.append((t3 - t0) * 1e3)
        run.block.append(block)
    del it  # stops this block's workers
    return run
