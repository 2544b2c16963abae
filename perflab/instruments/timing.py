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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from perflab.instruments.sequential import NO_CHANGE

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


@dataclass
class HostReturn:
    """One series of calls, each timed twice: when it returned to the host, and when its
    work was done (the sync right after it) — ms, sample i of both from the same call."""

    returned_ms: list[float]
    completed_ms: list[float]


def host_return_samples(fn: Step, *, repeats: int, sync: Sync) -> HostReturn:
    """Time until ``fn`` returns to the host, from an empty queue, then until it completes.

    The first clock is the "one step, host-visible return only" number: what a timer
    reads if it stops when Python gets control back. The second is read after a sync
    that follows at once, so each call is set against its own completion, not against a
    series measured at another time (a drift between two series would read as a lie of the
    clock). The queue is drained before each call (outside the timed region) so every
    sample starts empty.
    """
    returned, completed = [], []
    for _ in range(repeats):
        sync()
        t0 = _clock()
        fn()
        t1 = _clock()
        sync()
        t2 = _clock()
        returned.append((t1 - t0) * 1e3)
        completed.append((t2 - t0) * 1e3)
    return HostReturn(returned, completed)


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


def time_events_idle_stream(fn: Step, *, warmup: int, repeats: int,
                            device: torch.device | str) -> list[float]:
    """CUDA-event ms around each call, the start event recorded into an idle stream.

    The queue is drained before each call, so the start event fires as soon as
    it is submitted: the reading spans the host's submission of the call (every
    gap it leaves between launches) as well as the device's execution. It is
    device time only for a call whose launches outrun the device; for that use
    :func:`time_wall_and_device`. Raises :class:`Unsupported` on a non-CUDA device.
    """
    clock = CudaClock(device)
    warm(fn, warmup, clock.sync)
    samples = []
    for _ in range(repeats):
        start, end = clock.event(), clock.event()
        clock.sync()
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(float(start.elapsed_time(end)))
    return samples


# --------------------------------------------------------------------------- device time

#: torch.cuda._sleep cycles per millisecond, by device index (measured once per process)
_SLEEP_CYCLES_PER_MS: dict[int, float] = {}


def sleep_cycles_per_ms(device: torch.device | str) -> float:
    """How many ``torch.cuda._sleep`` cycles last 1 ms on ``device``: measured once per process.

    The median of three event-timed sleeps of 2**22 cycles (about 2 ms at 2 GHz).
    """
    device = torch.device(device)
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _SLEEP_CYCLES_PER_MS:
        cycles = 1 << 22
        with torch.cuda.device(index):
            torch.cuda._sleep(1000)  # the sleep kernel's first launch loads it
            torch.cuda.synchronize(index)
            ms = []
            for _ in range(3):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                torch.cuda._sleep(cycles)
                end.record()
                end.synchronize()
                ms.append(float(start.elapsed_time(end)))
        _SLEEP_CYCLES_PER_MS[index] = cycles / sorted(ms)[1]
    return _SLEEP_CYCLES_PER_MS[index]


class CudaClock:
    """What the device-time instruments ask of CUDA: events, a device-side sleep, a drain.

    Tests pass a fake with the same three methods (tests/fake_cuda.py).
    """

    def __init__(self, device: torch.device | str):
        self.device = torch.device(device)
        if self.device.type != "cuda":
            raise Unsupported("CUDA events need a CUDA device")
        self.sync = synchronizer(self.device)

    def event(self):
        return torch.cuda.Event(enable_timing=True)

    def sleep(self, ms: float) -> None:
        """Keep the device busy for about ``ms`` ms (the host returns at once)."""
        torch.cuda._sleep(max(1, int(ms * sleep_cycles_per_ms(self.device))))


@dataclass
class DeviceTiming:
    """Wall clock and device time of one step, measured on neighbouring calls."""

    wall_ms: list[float]  # drained before, synchronized after: the helper's boundary
    idle_events_ms: list[float]  # CUDA events around those same calls, on an idle stream
    device_ms: list[float]  # CUDA events around the neighbouring call, the device kept ahead
    lead_ms: float  # the device-side sleep put ahead of each start event
    behind: int = 0  # device-ahead calls redone: the device caught up before submission ended


#: a device-ahead call is retried this many times, each with a longer lead, before giving up
#: (sooner where a retry shows the call waits for the device: its host time covers the lead)
AHEAD_RETRIES = 5


def _submission_ms(fn: Step, sync: Sync, n: int = 10) -> float:
    """The longest host submission of ``n`` calls from a drained queue (warm calls)."""
    longest = 0.0
    for _ in range(n):
        sync()
        t0 = _clock()
        fn()
        longest = max(longest, (_clock() - t0) * 1e3)
    sync()
    return longest


def _ahead_call(fn: Step, clock, lead_ms: float) -> tuple[float | None, float]:
    """One call with the device asleep ahead of it: (device ms or None if caught up, host ms)."""
    start, end = clock.event(), clock.event()
    clock.sync()
    t0 = _clock()
    clock.sleep(lead_ms)
    start.record()
    fn()
    end.record()
    # the start event has not fired yet: the whole call was queued while the device slept,
    # so it then runs back to back and the events span its execution alone
    ahead = not start.query()
    host_ms = (_clock() - t0) * 1e3
    end.synchronize()
    return (float(start.elapsed_time(end)) if ahead else None), host_ms


def time_wall_and_device(fn: Step, *, warmup: int, repeats: int,
                         device: torch.device | str = "cuda", clock=None) -> DeviceTiming:
    """The synchronized wall clock and the device time of ``fn``, ``repeats`` pairs of calls.

    Events recorded into an idle stream start counting at submission, so on a
    host-bound step they include every launch gap. Device time is measured
    instead with the device kept ahead of the host: a device-side sleep
    (``torch.cuda._sleep``, twice the longest host submission of ten warm calls)
    is queued before the start event, so the host submits the whole call while
    the device sleeps and the device then runs it back to back. A call whose
    start event had already fired when the host finished submitting is redone
    with a lead twice that call's submission (counted in ``behind``); a step that
    waits for the device inside the call (a host read) can never be ahead and
    raises :class:`Unsupported`. Each pair is a wall-clock call (events on an
    idle stream recorded around it too) and a device-ahead call, alternating
    which runs first, so ``wall - device`` is paired call by call.
    """
    clock = clock or CudaClock(device)
    warm(fn, warmup, clock.sync)
    res = DeviceTiming([], [], [], lead_ms=max(2 * _submission_ms(fn, clock.sync), 0.1))

    def wall_call() -> None:
        start, end = clock.event(), clock.event()
        clock.sync()
        t0 = _clock()
        start.record()
        fn()
        end.record()
        clock.sync()
        res.wall_ms.append((_clock() - t0) * 1e3)
        res.idle_events_ms.append(float(start.elapsed_time(end)))

    def device_call() -> None:
        lead = res.lead_ms
        for tries in range(1, 2 + AHEAD_RETRIES):
            ms, host_ms = _ahead_call(fn, clock, lead)
            if ms is not None:
                res.device_ms.append(ms)
                return
            res.behind += 1
            last, lead = lead, 2 * max(host_ms, lead)
            # a retry's lead was twice the call before it: a call still holding the host
            # when the whole lead had passed waited for the device's sleep inside it, and a
            # longer lead only lengthens the wait (on an H100 the doubling leads slept 4 s of
            # a diagnose job's 2.9 s share before giving up)
            if tries > 1 and host_ms >= last:
                break
        raise Unsupported(f"the device caught up with the host {tries} times in a row (last "
                          f"lead {last:.1f} ms, the call held the host {host_ms:.1f} ms): the "
                          "step waits for the device inside the call, so events cannot "
                          "isolate its device time")

    for i in range(repeats):
        for call in ((wall_call, device_call) if i % 2 == 0 else (device_call, wall_call)):
            call()
    return res


@dataclass
class ABResult:
    """Interleaved A/B: per-call samples and per-block medians of each side."""

    a_samples: list[float] = field(default_factory=list)
    b_samples: list[float] = field(default_factory=list)
    a_blocks: list[float] = field(default_factory=list)  # ms per call, one value per block
    b_blocks: list[float] = field(default_factory=list)
    order: list[str] = field(default_factory=list)  # "AB" or "BA" for each block pair


def ab_order(block: int) -> str:
    """The order of block pair ``block`` of an interleaved A/B: "AB", then "BA", in turn, so
    neither side always runs second."""
    return "AB" if block % 2 == 0 else "BA"


def interleaved_ab(
    fa: Step, fb: Step, *, blocks: int, inner: int, warmup: int, sync: Sync
) -> ABResult:
    """Alternate blocks of A and B so drift on a shared machine hits both alike.

    Block pairs alternate order (AB, BA, AB, ...) so neither side always runs
    second. Each block's value is the median of its ``inner`` synchronized
    calls; the spread of block values is the block-to-block noise an effect
    must exceed before it is called resolved.
    """
    for _ in range(warmup):
        fa()
        fb()
    sync()
    res = ABResult()
    _ab_blocks(res, fa, fb, blocks, inner, sync)
    return res


def _ab_blocks(res: ABResult, fa: Step, fb: Step, count: int, inner: int, sync: Sync) -> None:
    """``count`` more block pairs of an interleaved A/B, appended to ``res`` (the AB/BA order
    continues from the pairs already there)."""
    import statistics

    for i in range(len(res.order), len(res.order) + count):
        order = ab_order(i)
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


#: block pairs per round of an adaptive A/B: even, so each round is balanced AB/BA
ROUND_BLOCKS = 4


def ab_window(res: ABResult, warmup: int) -> str:
    """The window of an interleaved A/B as it ran (an adaptive one's blocks are its own)."""
    n = len(res.a_blocks)
    return f"{n} interleaved blocks of {len(res.a_samples) // max(1, n)} after warmup {warmup}"


def block_diffs_pct(a_blocks: list[float], b_blocks: list[float]) -> list[float]:
    """Per-block relative differences B vs A in % (the sequential rule's observations)."""
    return [100.0 * (b - a) / a for a, b in zip(a_blocks, b_blocks)]


def rounds_until_decided(run_round: Callable[[int], tuple[list[float], list[float]]], *,
                         floor_pct, max_blocks: int, thresholds: Sequence[float] = NO_CHANGE,
                         round_blocks: int = ROUND_BLOCKS,
                         expired: Callable[[], bool] = lambda: False):
    """The adaptive A/B's loop, apart from the clock: ``run_round(k)`` runs ``k`` more block
    pairs and returns all block medians so far (A's, B's); rounds go on until the per-block
    differences are decided against every one of ``thresholds`` (% of A: the claim's; 0, the
    A/B's own question, by default) by :func:`perflab.instruments.sequential.against`,
    ``max_blocks`` are spent, the rule says more would not decide it, or ``expired()`` (the
    job's budget). ``floor_pct``: the A/A floor (%), or ``floor(n)`` for ``n`` block pairs
    (a claim holds an A/B to the floor of its own pairs), or None. Returns the last
    :class:`perflab.instruments.sequential.Decision`."""
    from perflab.instruments import sequential as seq

    n, d = 0, None
    while n < max_blocks:
        a, b = run_round(min(round_blocks, max_blocks - n))
        diffs = block_diffs_pct(a, b)
        n = len(diffs)
        d = seq.against(diffs, thresholds, floor_pct, max_n=max_blocks)
        if d.decided or d.futile or expired():
            break
    return d


#: an adaptive A/B's blocks are this many times shorter than the fixed contract's (at least
#: one call): the rule needs about ten block pairs to decide even a clear change, so short
#: blocks are where the time is saved (scripts/bench_sequential.py: W01's one stretch a block)
ADAPTIVE_SPLIT = 3
#: an adaptive A/B times at most this many times the fixed contract's calls (the simulations'
#: power at twice the floor is for twice the fixed count)
MAX_CALLS_FACTOR = 2


def adaptive_sizes(blocks: int, inner: int) -> tuple[int, int]:
    """(at most this many block pairs, calls per block) of the adaptive twin of a fixed A/B of
    ``blocks`` pairs of ``inner`` calls: blocks :data:`ADAPTIVE_SPLIT` x shorter, at most
    :data:`MAX_CALLS_FACTOR` x the fixed calls."""
    small = max(1, -(-inner // ADAPTIVE_SPLIT))
    return max(ROUND_BLOCKS, MAX_CALLS_FACTOR * blocks * inner // small), small


def sequential_ab(fa: Step, fb: Step, *, max_blocks: int, inner: int, warmup: int, sync: Sync,
                  floor_pct, thresholds: Sequence[float] = NO_CHANGE,
                  round_blocks: int = ROUND_BLOCKS, deadline_s: float | None = None):
    """:func:`interleaved_ab` in rounds of ``round_blocks`` pairs that stops as soon as the
    per-block difference is decided against each of ``thresholds`` and the A/A floor
    (:func:`rounds_until_decided`: issue 40's stopping rule, valid under looking after every
    round), or ``max_blocks`` or ``deadline_s`` (seconds from now) are spent. Returns (the
    :class:`ABResult` of the blocks actually run, the decision)."""
    for _ in range(warmup):
        fa()
        fb()
    sync()
    res = ABResult()
    end = None if deadline_s is None else time.perf_counter() + deadline_s

    def run_round(k: int) -> tuple[list[float], list[float]]:
        _ab_blocks(res, fa, fb, k, inner, sync)
        return res.a_blocks, res.b_blocks

    decision = rounds_until_decided(
        run_round, floor_pct=floor_pct, max_blocks=max_blocks, thresholds=thresholds,
        round_blocks=round_blocks, expired=lambda: end is not None and time.perf_counter() >= end)
    return res, decision


@dataclass
class RoundRobinResult:
    """Interleaved N-way timing: per-call samples, block index and block medians per variant."""

    samples: dict[str, list[float]] = field(default_factory=dict)
    blocks: dict[str, list[int]] = field(default_factory=dict)  # block index of each sample
    block_medians: dict[str, list[float]] = field(default_factory=dict)


def williams_orders(n: int) -> list[list[int]]:
    """Balanced run orders of ``n`` variants (a Williams design), as lists of indices.

    Over the returned orders every variant runs in every position, and right
    after every other variant, equally often: ``n`` orders for an even ``n``,
    ``2n`` (each order and its reverse) for an odd one. For two variants they
    are AB, BA. A cyclic rotation (ABC, BCA, CAB) instead always puts the same
    neighbour before each variant, so a carry-over from one variant to the
    next would bias them unequally.
    """
    if n < 1:
        raise ValueError("a round robin needs at least one variant")
    first, lo, hi = [0], 1, n - 1
    while len(first) < n:  # 0, 1, n-1, 2, n-2, ...
        first.append(lo)
        lo += 1
        if len(first) < n:
            first.append(hi)
            hi -= 1
    orders = [[(x + i) % n for x in first] for i in range(n)]
    return orders + [o[::-1] for o in orders] if n % 2 and n > 1 else orders


def interleaved_round_robin(
    steps: dict[str, Step], *, blocks: int, inner: int, warmup: int, sync: Sync
) -> RoundRobinResult:
    """:func:`interleaved_ab` for N variants: each block runs every variant once.

    Block ``i`` runs the variants in the ``i``-th balanced order of
    :func:`williams_orders` (cycling), so over a whole number of cycles every
    variant runs first, last and after each neighbour equally often; drift and
    carry-over on a shared machine then hit every variant alike. Each call is
    synchronized at both ends.
    """
    import statistics

    names = list(steps)
    for _ in range(warmup):
        for name in names:
            steps[name]()
    sync()
    res = RoundRobinResult({n: [] for n in names}, {n: [] for n in names}, {n: [] for n in names})

    def block(i: int, name: str) -> None:
        got = time_calls(steps[name], warmup=0, repeats=inner, sync=sync)
        res.samples[name].extend(got)
        res.blocks[name].extend([i] * len(got))
        res.block_medians[name].append(statistics.median(got))

    round_robin(names, blocks=blocks, run=block)
    return res


def round_robin(names: list, *, blocks: int, run: Callable[[int, object], None]) -> None:
    """Call ``run(i, name)`` for every name in each block ``i``, the names of block ``i`` in
    the ``i``-th balanced order of :func:`williams_orders` (cycling): the order of
    :func:`interleaved_round_robin`, for a block that measures something else than
    ``inner`` synchronized calls (E08's calls and free-running stretch)."""
    orders = williams_orders(len(names))
    for i in range(blocks):
        for k in orders[i % len(orders)]:
            run(i, names[k])


#: how the round robin's order reads in a row's sync_boundary
ROUND_ROBIN_ORDER = "variants interleaved in balanced (Williams) order, block by block"

#: the sync boundary of a throughput derived from per-call samples (not a free-running stretch)
DRAINED_THROUGHPUT = ("batch / drained latency: examples per step over the median per-call "
                      "latency, each call synchronized at both ends (not a free-running rate: "
                      "the host never runs ahead of the device)")


def free_running_ms_per_step(fn: Step, *, steps: int, stretches: int, sync: Sync) -> list[float]:
    """ms per step of ``stretches`` free-running stretches of ``steps`` calls each.

    Each stretch starts from a drained queue and ends with one sync: the rate
    of a training loop, where the host may run ahead of the device (what a
    per-call synchronized sample forbids). Warm the step first.
    """
    if steps < 1 or stretches < 1:
        raise ValueError("a free-running stretch needs steps >= 1 and stretches >= 1")
    return [time_unsynchronized_loop(fn, steps, sync).real_ms_per_step for _ in range(stretches)]


#: the sync boundary of a throughput from :func:`free_running_ms_per_step`
FREE_RUNNING_THROUGHPUT = ("free-running: examples per step over the median ms per step of "
                           "stretches of steps with one sync at each stretch's end (queue "
                           "drained before)")


def _peer_timer(fn: Step):
    from torch.utils.benchmark import Timer

    # the Timer runs its statement on one intra-op thread unless told otherwise: on a CPU
    # that times another step than the helper's, which runs on the process's threads
    return Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())


def timer_blocked_autorange(fn: Step, *, min_run_time: float) -> dict[str, object]:
    """torch.utils.benchmark's Timer on the same callable, as a peer measurement.

    Returns per-call median and IQR (ms), the block size it chose
    (``number_per_run``), the number of blocks (``runs``) and the per-call
    times of each block (ms).
    """
    m = _peer_timer(fn).blocked_autorange(min_run_time=min_run_time)
    return {
        "median_ms": m.median * 1e3,
        "iqr_ms": m.iqr * 1e3,
        "mean_ms": m.mean * 1e3,
        "number_per_run": int(m.number_per_run),
        "runs": len(m.times),
        "times_ms": [t * 1e3 for t in m.times],
    }


def timer_blocks(fn: Step, *, number: int, min_run_time: float) -> list[float]:
    """Per-call times (ms) of blocks of ``number`` calls, one ``Timer.timeit(number)`` each,
    until ``min_run_time`` seconds have passed (at least one block).

    blocked_autorange's loop at a block size already chosen: its own choice is redone on
    every call and swings between 10 and 100 calls on one H200 step with the noise of its
    overhead estimate, so a run that takes turns with the helper picks it once. Each block
    starts with the Timer's own warmup of ``max(number // 100, 2)`` calls, untimed.
    """
    if number < 1 or min_run_time <= 0:
        raise ValueError(f"number must be >= 1 and min_run_time > 0, got {number}, "
                         f"{min_run_time}")
    timer, times = _peer_timer(fn), []
    end = _clock() + min_run_time
    while not times or _clock() < end:
        times.append(timer.timeit(number).median * 1e3)
    return times


class Unsupported(RuntimeError):
    """An instrument that cannot measure on this device; becomes an `unsupported` row."""
