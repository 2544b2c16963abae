"""Timing instruments: one place for every clock the pipeline reads.

Every function takes the step as a zero-argument callable and a ``sync``
callable that waits for all work already submitted to the device to finish
(``torch.cuda.synchronize`` on CUDA, a no-op on CPU; see :func:`synchronizer`).
Keeping ``sync`` a parameter is what lets the tests check these instruments with
a fake asynchronous device: a region is measured at its completion only if the
instrument calls ``sync`` before reading the clock.

All durations are returned in milliseconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

Step = Callable[[], object]
Sync = Callable[[], None]

_clock = time.perf_counter


def _no_sync() -> None:
    return None


def synchronizer(device: torch.device | str) -> Sync:
    """The function that drains ``device``'s queue: the chapter's boundary."""
    device = torch.device(device)
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()

        def _sync() -> None:
            torch.cuda.synchronize(index)

        return _sync
    return _no_sync


def warm(fn: Step, n: int, sync: Sync) -> None:
    """Run ``fn`` ``n`` times (first-call costs belong to the process), then drain."""
    for _ in range(n):
        fn()
    sync()


def time_calls(fn: Step, *, warmup: int, repeats: int, sync: Sync) -> list[float]:
    """Per-call samples, device synchronized at both ends of every call.

    Warmup calls run first and are discarded. The queue is drained before each
    call starts (so a call never pays for its predecessor) and after it
    returns (so the sample ends at completion, not at submission).
    """
    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    warm(fn, warmup, sync)
    samples = []
    for _ in range(repeats):
        sync()
        t0 = _clock()
        fn()
        sync()
        samples.append((_clock() - t0) * 1e3)
    return samples


def time_first_call(fn: Step, sync: Sync) -> float:
    """One synchronized call: the cold cost when it is the first in the process."""
    sync()
    t0 = _clock()
    fn()
    sync()
    return (_clock() - t0) * 1e3


@dataclass
class LoopTiming:
    """What an unsynchronized loop reports, and what it hid."""

    steps: int
    reported_ms_per_step: float  # clock read right after the loop returns
    backlog_ms: float  # how long the final sync then blocked: work still queued
    real_ms_per_step: float  # loop + backlog, per step


def time_unsynchronized_loop(fn: Step, steps: int, sync: Sync) -> LoopTiming:
    """The opening benchmark of the chapter: a loop timed without a sync inside.

    The queue is drained before the loop starts, so the backlog measured by the
    final sync belongs to this loop alone.
    """
    sync()
    t0 = _clock()
    for _ in range(steps):
        fn()
    t1 = _clock()
    sync()
    t2 = _clock()
    return LoopTiming(
        steps=steps,
        reported_ms_per_step=(t1 - t0) * 1e3 / steps,
        backlog_ms=(t2 - t1) * 1e3,
        real_ms_per_step=(t2 - t0) * 1e3 / steps,
    )


def host_return_samples(fn: Step, *, repeats: int, sync: Sync) -> list[float]:
    """Time until ``fn`` returns to the host, from an empty queue, no sync after.

    This is the "one step, host-visible return only" number: what a timer
    reads if it stops when Python gets control back. The queue is drained
    between samples (outside the timed region) so every sample starts empty.
    """
    samples = []
    for _ in range(repeats):
        sync()
        t0 = _clock()
        fn()
        samples.append((_clock() - t0) * 1e3)
    sync()
    return samples


def host_submission_samples(fn: Step, *, warmup: int, repeats: int, sync: Sync) -> list[float]:
    """Host time per call in a free-running loop (no sync between calls).

    Once the device queue is full the host is throttled by backpressure, so on
    a device-bound step this approaches the device time; on a host-bound step
    it is the host's own cost per step.
    """
    warm(fn, warmup, sync)
    samples = []
    t_prev = _clock()
    for _ in range(repeats):
        fn()
        t = _clock()
        samples.append((t - t_prev) * 1e3)
        t_prev = t
    sync()
    return samples


def time_cuda_events(fn: Step, *, warmup: int, repeats: int, device: torch.device | str) -> list[float]:
    """Device-side duration of each call, from CUDA events recorded around it.

    Raises :class:`Unsupported` on a non-CUDA device.
    """
    device = torch.device(device)
    if device.type != "cuda":
        raise Unsupported("CUDA events need a CUDA device")
    sync = synchronizer(device)
    warm(fn, warmup, sync)
    samples = []
    for _ in range(repeats):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        sync()
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(float(start.elapsed_time(end)))
    return samples


def time_wall_and_events(
    fn: Step, *, warmup: int, repeats: int, device: torch.device | str
) -> tuple[list[float], list[float]]:
    """Both instruments on the same calls: (synchronized wall ms, CUDA-event ms).

    Each call is bracketed by the host clock (queue drained before, synchronized
    after) and by two events recorded into the stream, so ``wall - events`` is a
    paired per-call difference, not a difference of two separate series'
    medians that drift apart on a shared device.
    """
    device = torch.device(device)
    if device.type != "cuda":
        raise Unsupported("CUDA events need a CUDA device")
    sync = synchronizer(device)
    warm(fn, warmup, sync)
    wall, events = [], []
    for _ in range(repeats):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        sync()
        t0 = _clock()
        start.record()
        fn()
        end.record()
        sync()
        wall.append((_clock() - t0) * 1e3)
        events.append(float(start.elapsed_time(end)))
    return wall, events


@dataclass
class ABResult:
    """Interleaved A/B: per-call samples and per-block medians of each side."""

    a_samples: list[float] = field(default_factory=list)
    b_samples: list[float] = field(default_factory=list)
    a_blocks: list[float] = field(default_factory=list)  # ms per call, one value per block
    b_blocks: list[float] = field(default_factory=list)
    order: list[str] = field(default_factory=list)  # "AB" or "BA" for each block pair


def interleaved_ab(
    fa: Step, fb: Step, *, blocks: int, inner: int, warmup: int, sync: Sync
) -> ABResult:
    """Alternate blocks of A and B so drift on a shared machine hits both alike.

    Block pairs alternate order (AB, BA, AB, ...) so neither side always runs
    second. Each block's value is the median of its ``inner`` synchronized
    calls; the spread of block values is the block-to-block noise an effect
    must exceed before it is called resolved.
    """
    import statistics

    for _ in range(warmup):
        fa()
        fb()
    sync()
    res = ABResult()
    for i in range(blocks):
        order = "AB" if i % 2 == 0 else "BA"
        res.order.append(order)
        for side in order:
            fn = fa if side == "A" else fb
            block = time_calls(fn, warmup=0, repeats=inner, sync=sync)
            if side == "A":
                res.a_samples.extend(block)
                res.a_blocks.append(statistics.median(block))
            else:
                res.b_samples.extend(block)
                res.b_blocks.append(statistics.median(block))
    return res


@dataclass
class RoundRobinResult:
    """Interleaved N-way timing: per-call samples, block index and block medians per variant."""

    samples: dict[str, list[float]] = field(default_factory=dict)
    blocks: dict[str, list[int]] = field(default_factory=dict)  # block index of each sample
    block_medians: dict[str, list[float]] = field(default_factory=dict)


def interleaved_round_robin(
    steps: dict[str, Step], *, blocks: int, inner: int, warmup: int, sync: Sync
) -> RoundRobinResult:
    """:func:`interleaved_ab` for N variants: each block runs every variant once.

    The order rotates from block to block (ABC, BCA, CAB, ...) so no variant
    always runs first or after the same neighbour; drift on a shared machine
    then hits every variant alike. Each call is synchronized at both ends.
    """
    import statistics

    names = list(steps)
    for _ in range(warmup):
        for name in names:
            steps[name]()
    sync()
    res = RoundRobinResult({n: [] for n in names}, {n: [] for n in names}, {n: [] for n in names})
    for i in range(blocks):
        k = i % len(names)
        for name in names[k:] + names[:k]:
            block = time_calls(steps[name], warmup=0, repeats=inner, sync=sync)
            res.samples[name].extend(block)
            res.blocks[name].extend([i] * len(block))
            res.block_medians[name].append(statistics.median(block))
    return res


def timer_blocked_autorange(fn: Step, *, min_run_time: float) -> dict[str, object]:
    """torch.utils.benchmark's Timer on the same callable, as a peer measurement.

    Returns per-call median and IQR (ms), the block size it chose
    (``number_per_run``), the number of blocks (``runs``) and the per-call
    times of each block (ms).
    """
    from torch.utils.benchmark import Timer

    m = Timer(stmt="fn()", globals={"fn": fn}).blocked_autorange(min_run_time=min_run_time)
    return {
        "median_ms": m.median * 1e3,
        "iqr_ms": m.iqr * 1e3,
        "mean_ms": m.mean * 1e3,
        "number_per_run": int(m.number_per_run),
        "runs": len(m.times),
        "times_ms": [t * 1e3 for t in m.times],
    }


class Unsupported(RuntimeError):
    """An instrument that cannot measure on this device; becomes an `unsupported` row."""
