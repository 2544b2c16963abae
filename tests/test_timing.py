"""perflab.instruments.timing against a fake asynchronous device (no CUDA needed).

The fake (tests/conftest.py) queues work on a background thread and returns
from ``submit`` at once; ``synchronize`` waits for the queue to drain. An
instrument that reads its clock at submission instead of completion fails
these tests. Timing assertions are lower bounds guaranteed by the fake's
busy-wait on the instruments' own clock, or orderings/ratios within one run;
never absolute upper bounds.
"""

from __future__ import annotations

import statistics
import time

import pytest
from fake_cuda import FakeCudaClock

from perflab.instruments import timing

WORK_S = 0.020
WORK_MS = WORK_S * 1e3
EPS_MS = 1e-6  # float rounding of (t1 - t0) * 1e3 only


def _no_sync() -> None:
    return None


# ---------------------------------------------------------------- the fake itself


def test_fake_device_is_asynchronous(fake_device):
    """Sanity: submit returns before the work is done, synchronize waits for it."""
    t0 = time.perf_counter()
    fake_device.submit(WORK_S)
    fake_device.submit(WORK_S)
    t_submit = time.perf_counter() - t0
    fake_device.synchronize()
    t_done = time.perf_counter() - t0
    assert fake_device.completed == 2 and fake_device.pending == 0
    assert t_done >= 2 * WORK_S
    assert t_submit < t_done / 4


# ---------------------------------------------------------------- time_calls


def test_time_calls_measures_completion(fake_device):
    step = fake_device.step(WORK_S)
    samples = timing.time_calls(step, warmup=2, repeats=5, sync=fake_device.synchronize)
    assert len(samples) == 5
    assert fake_device.submitted == 7  # warmup calls ran (and were discarded)
    assert all(s >= WORK_MS - EPS_MS for s in samples), samples
    assert fake_device.pending == 0


def test_time_calls_without_sync_measures_submission(fake_device):
    """The control: the same step, timed with a no-op sync, is far below the work.

    This is what makes the test above meaningful: the fake really is asynchronous.
    """
    step = fake_device.step(WORK_S)
    try:
        samples = timing.time_calls(step, warmup=0, repeats=5, sync=_no_sync)
    finally:
        fake_device.synchronize()
    assert statistics.median(samples) < WORK_MS / 4, samples


def test_time_calls_rejects_zero_repeats(fake_device):
    with pytest.raises(ValueError):
        timing.time_calls(fake_device.step(WORK_S), warmup=0, repeats=0, sync=fake_device.synchronize)


def test_time_calls_warmup_backlog_not_charged_to_first_sample(fake_device):
    """Warmup work still queued must be drained before the first sample starts.

    With 5 warmup calls of 20 ms queued, a first sample that paid for them
    would be >= 100 ms; the samples are compared with each other (same run).
    """
    samples = timing.time_calls(
        fake_device.step(WORK_S), warmup=5, repeats=3, sync=fake_device.synchronize
    )
    # a first sample that paid for the queued warmup would be >= 6 * WORK_MS
    assert samples[0] < min(samples) + 4 * WORK_MS, samples


# ---------------------------------------------------------------- call order (no clocks)


class _Recorder:
    """Replaces the clock and records fn/sync/clock events in order."""

    def __init__(self):
        self.events: list[str] = []
        self.t = 0.0

    def clock(self) -> float:
        self.events.append("clock")
        self.t += 1.0
        return self.t

    def fn(self) -> None:
        self.events.append("fn")

    def sync(self) -> None:
        self.events.append("sync")


def test_time_calls_syncs_around_every_timed_call(monkeypatch):
    rec = _Recorder()
    monkeypatch.setattr(timing, "_clock", rec.clock)
    timing.time_calls(rec.fn, warmup=1, repeats=2, sync=rec.sync)
    timed = ["sync", "clock", "fn", "sync", "clock"]
    assert rec.events == ["fn", "sync", *timed, *timed]


def test_host_return_stops_the_clock_before_sync(monkeypatch):
    rec = _Recorder()
    monkeypatch.setattr(timing, "_clock", rec.clock)
    timing.host_return_samples(rec.fn, repeats=2, sync=rec.sync)
    # the return read before the sync, the completion of the same call after it
    assert rec.events == ["sync", "clock", "fn", "clock", "sync", "clock"] * 2


def test_unsynchronized_loop_call_order(monkeypatch):
    rec = _Recorder()
    monkeypatch.setattr(timing, "_clock", rec.clock)
    res = timing.time_unsynchronized_loop(rec.fn, 3, rec.sync)
    assert rec.events == ["sync", "clock", "fn", "fn", "fn", "clock", "sync", "clock"]
    # clock reads 1, 2, 3 s: reported 1 s / 3 steps, backlog 1 s, real 2 s / 3 steps
    assert res.steps == 3
    assert res.reported_ms_per_step == pytest.approx(1e3 / 3)
    assert res.backlog_ms == pytest.approx(1e3)
    assert res.real_ms_per_step == pytest.approx(2e3 / 3)


# ---------------------------------------------------------------- unsynchronized loop


def test_unsynchronized_loop_hides_a_backlog_on_an_async_device(fake_device):
    steps = 5
    res = timing.time_unsynchronized_loop(fake_device.step(WORK_S), steps, fake_device.synchronize)
    assert res.steps == steps
    assert res.reported_ms_per_step < res.real_ms_per_step
    assert res.backlog_ms > 0
    # the truth is recovered by the final sync: all the work is inside the real time
    assert res.real_ms_per_step >= WORK_MS - EPS_MS
    # and the lie is large: most of the work was still queued when the loop returned
    assert res.backlog_ms > res.reported_ms_per_step * steps
    assert fake_device.pending == 0


def test_unsynchronized_loop_no_backlog_for_a_synchronous_step(fake_device):
    """Work done inside the call (submit + wait): nothing left for the final sync."""

    def sync_step():
        fake_device.submit(WORK_S)
        fake_device.synchronize()

    res = timing.time_unsynchronized_loop(sync_step, 5, fake_device.synchronize)
    assert res.reported_ms_per_step >= WORK_MS - EPS_MS
    assert res.backlog_ms >= 0
    assert res.backlog_ms < 0.25 * res.real_ms_per_step  # ~0 relative to one step
    assert res.reported_ms_per_step <= res.real_ms_per_step


# ---------------------------------------------------------------- host return vs completion


def test_host_return_measures_submission_time_calls_completion(fake_device):
    step = fake_device.step(WORK_S)
    got = timing.host_return_samples(step, repeats=5, sync=fake_device.synchronize)
    assert fake_device.pending == 0  # drained before returning
    host, same_calls = got.returned_ms, got.completed_ms
    done = timing.time_calls(step, warmup=0, repeats=5, sync=fake_device.synchronize)
    assert len(host) == len(done) == len(same_calls) == 5
    assert min(done) >= WORK_MS - EPS_MS and min(same_calls) >= WORK_MS - EPS_MS
    assert statistics.median(host) < min(done) / 4, (host, done)
    assert all(h < c for h, c in zip(host, same_calls))


def test_host_submission_samples_drains_at_the_end(fake_device):
    samples = timing.host_submission_samples(
        fake_device.step(WORK_S), warmup=1, repeats=4, sync=fake_device.synchronize
    )
    assert len(samples) == 4
    assert all(s >= 0 for s in samples)
    assert fake_device.pending == 0
    assert fake_device.completed == 5


# ---------------------------------------------------------------- interleaved A/B


def test_interleaved_ab_orders_blocks_and_separates_sides(fake_device):
    a_s, b_s = 0.015, 0.030  # B does twice A's work
    blocks, inner = 4, 3
    res = timing.interleaved_ab(
        fake_device.step(a_s),
        fake_device.step(b_s),
        blocks=blocks,
        inner=inner,
        warmup=1,
        sync=fake_device.synchronize,
    )
    assert res.order == ["AB", "BA", "AB", "BA"]
    assert len(res.a_blocks) == len(res.b_blocks) == blocks
    assert len(res.a_samples) == len(res.b_samples) == blocks * inner
    assert min(res.b_blocks) > max(res.a_blocks), (res.a_blocks, res.b_blocks)
    # every sample is measured at completion
    assert min(res.a_samples) >= a_s * 1e3 - EPS_MS
    assert min(res.b_samples) >= b_s * 1e3 - EPS_MS
    # a block value is the median of its inner samples
    for i, v in enumerate(res.a_blocks):
        assert v == statistics.median(res.a_samples[i * inner : (i + 1) * inner])
    assert fake_device.submitted == 2 * (1 + blocks * inner)


def test_interleaved_ab_order_alternates_for_odd_block_count(fake_device):
    res = timing.interleaved_ab(
        fake_device.step(0.001), fake_device.step(0.001),
        blocks=3, inner=1, warmup=0, sync=fake_device.synchronize,
    )
    assert res.order == ["AB", "BA", "AB"]


# ---------------------------------------------------------------- first call


def test_time_first_call_waits_for_completion(fake_device):
    ms = timing.time_first_call(fake_device.step(WORK_S), fake_device.synchronize)
    assert ms >= WORK_MS - EPS_MS
    assert fake_device.pending == 0


def test_time_first_call_without_sync_would_not(fake_device):
    try:
        ms = timing.time_first_call(fake_device.step(WORK_S), _no_sync)
    finally:
        fake_device.synchronize()
    assert ms < WORK_MS / 4


# ---------------------------------------------------------------- device-specific


def test_synchronizer_on_cpu_is_a_noop():
    sync = timing.synchronizer("cpu")
    assert sync() is None


def test_cuda_events_unsupported_on_cpu():
    called = []
    with pytest.raises(timing.Unsupported):
        timing.time_events_idle_stream(lambda: called.append(1), warmup=1, repeats=1,
                                       device="cpu")
    assert called == []
    assert issubclass(timing.Unsupported, RuntimeError)
    with pytest.raises(timing.Unsupported):
        timing.time_wall_and_device(lambda: called.append(1), warmup=1, repeats=1, device="cpu")
    assert called == []


def test_timer_blocked_autorange_on_cheap_callable():
    import torch

    x = torch.ones(16)
    r = timing.timer_blocked_autorange(lambda: x.add(1), min_run_time=0.05)
    assert set(r) >= {"median_ms", "iqr_ms", "mean_ms", "number_per_run", "runs", "times_ms"}
    assert r["number_per_run"] >= 1
    assert r["runs"] >= 1
    assert len(r["times_ms"]) == r["runs"]
    assert all(t > 0 for t in r["times_ms"])
    # the summary is of the per-run times it returns (not of another series): its median and
    # IQR are theirs, recomputed here
    import numpy as np

    t = np.asarray(r["times_ms"])
    assert r["median_ms"] == pytest.approx(float(np.median(t)))
    q1, q3 = np.percentile(t, [25, 75])
    assert r["iqr_ms"] == pytest.approx(float(q3 - q1), rel=1e-6, abs=1e-12)



def test_timer_blocks_times_per_call_blocks_of_the_given_size():
    """Blocks of a fixed size until the time is spent: each value is one block's time per
    call (blocks of 4 read about what blocks of 1 read, not 4x), the Timer's warmup untimed."""
    import statistics
    import time

    calls = []

    def fn():
        calls.append(1)
        time.sleep(0.002)

    times = timing.timer_blocks(fn, number=4, min_run_time=0.05)
    assert len(times) >= 2 and all(t >= 2.0 for t in times)
    assert len(calls) == len(times) * (4 + 2)  # each block: its 2 warmup calls, then 4
    ones = timing.timer_blocks(fn, number=1, min_run_time=0.05)
    assert 0.5 < statistics.median(times) / statistics.median(ones) < 2.0
    assert len(timing.timer_blocks(fn, number=1, min_run_time=1e-9)) == 1
    with pytest.raises(ValueError):
        timing.timer_blocks(fn, number=0, min_run_time=0.01)


def test_timer_blocked_autorange_runs_on_the_process_threads():
    """torch.utils.benchmark's Timer defaults to one intra-op thread; the peer must time the
    step the helper times, on the process's threads (on a 2-core CPU the one-thread Timer
    read +35% over the helper, interleaved with it)."""
    import torch

    seen, before = [], torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        timing.timer_blocked_autorange(lambda: seen.append(torch.get_num_threads()),
                                       min_run_time=0.01)
    finally:
        torch.set_num_threads(before)
    assert seen and set(seen) == {2}

# ---------------------------------------------------------------- device time (fake CUDA events)

GAP_S, KERNEL_S = 0.004, 0.001  # host time between launches, device time of each launch


def _host_bound_step(dev, kernels=3):
    """Three short kernels with the host busy for GAP_S between launches: launch-gap bound."""

    def step():
        for i in range(kernels):
            if i:
                time.sleep(GAP_S)
            dev.submit(KERNEL_S)

    return step


def test_device_time_excludes_planted_launch_gaps(fake_device):
    res = timing.time_wall_and_device(_host_bound_step(fake_device), warmup=1, repeats=6,
                                      clock=FakeCudaClock(fake_device))
    assert len(res.wall_ms) == len(res.device_ms) == len(res.idle_events_ms) == 6
    work_ms, host_ms = 3 * KERNEL_S * 1e3, 2 * GAP_S * 1e3
    # every sample holds its call's device work; the wall also holds the host's gaps
    assert min(res.device_ms) >= work_ms - EPS_MS
    assert min(res.wall_ms) >= host_ms + KERNEL_S * 1e3 - EPS_MS
    wall, device = statistics.median(res.wall_ms), statistics.median(res.device_ms)
    assert device < 0.6 * wall, (res.device_ms, res.wall_ms)
    # the idle-stream events, recorded around the wall calls, include the gaps: they track wall
    assert statistics.median(res.idle_events_ms) > 0.8 * wall, (res.idle_events_ms, wall)
    # the lead was sized from the host's submission (two gaps), twice over
    assert res.lead_ms >= 2 * host_ms


def test_device_time_of_a_device_bound_step_is_close_to_wall(fake_device):
    res = timing.time_wall_and_device(fake_device.step(WORK_S), warmup=1, repeats=6,
                                      clock=FakeCudaClock(fake_device))
    assert min(res.device_ms) >= WORK_MS - EPS_MS
    wall, device = statistics.median(res.wall_ms), statistics.median(res.device_ms)
    # within a few % of wall, either side: the device and the wall samples are different
    # calls, so on a loaded host a device median may read above the wall one (20.44 against
    # 20.34 ms once in CI)
    assert 0.85 * wall < device < 1.05 * wall, (res.device_ms, res.wall_ms)


def test_a_step_that_waits_for_the_device_cannot_be_ahead(fake_device):
    """A host read inside the step drains the queue: the device can never stay ahead."""

    def step():
        fake_device.submit(KERNEL_S)
        fake_device.synchronize()

    clock = FakeCudaClock(fake_device)
    with pytest.raises(timing.Unsupported, match="waits for the device"):
        timing.time_wall_and_device(step, warmup=0, repeats=2, clock=clock)
    # the retry doubled the lead, and the call held the host through it: given up there,
    # not after every retry's doubled sleep (4 s of sleeps on an H100's syncing step)
    assert len(clock.sleeps_ms) == 2
    assert clock.sleeps_ms[1] >= 2 * clock.sleeps_ms[0]


def test_a_host_slower_than_the_first_lead_gets_its_retries(fake_device):
    """A call whose host submission outran the first lead (a slow first call, not a wait for
    the device) is retried with a lead twice its submission, and then is ahead."""
    calls = []

    def step():
        # the lead is sized by 10 calls, then a wall call: the 12th is the first device-ahead
        # one, its host slow once (50 ms against a lead of about 8)
        calls.append(1)
        time.sleep(0.05 if len(calls) == 12 else GAP_S)
        fake_device.submit(KERNEL_S)

    clock = FakeCudaClock(fake_device)
    res = timing.time_wall_and_device(step, warmup=0, repeats=1, clock=clock)
    assert res.behind >= 1 and len(res.device_ms) == 1


class _EventRecorder:
    """A CUDA clock that logs every call; its start event never fires (the device is ahead)."""

    def __init__(self, rec):
        self.rec = rec

    def event(self):
        rec = self.rec

        class Ev:
            def record(self):
                rec.events.append("record")

            def query(self):
                rec.events.append("query")
                return False

            def synchronize(self):
                rec.events.append("event_sync")

            def elapsed_time(self, end):
                return 1.0

        return Ev()

    def sleep(self, ms):
        self.rec.events.append("sleep")

    def sync(self):
        self.rec.sync()


def test_device_ahead_call_order(monkeypatch):
    rec = _Recorder()
    monkeypatch.setattr(timing, "_clock", rec.clock)
    timing.time_wall_and_device(rec.fn, warmup=0, repeats=2, clock=_EventRecorder(rec))
    ev = [e for e in rec.events if e != "clock"]
    lead = ["sync"] + ["sync", "fn"] * 10 + ["sync"]  # warm(0), then ten submissions: the lead
    wall = ["sync", "record", "fn", "record", "sync"]
    ahead = ["sync", "sleep", "record", "fn", "record", "query", "event_sync"]
    # pair 0: wall then device-ahead; pair 1: the other way round
    assert ev == lead + wall + ahead + ahead + wall


# ---------------------------------------------------------------- balanced round robin


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6])
def test_williams_orders_are_balanced(n):
    orders = timing.williams_orders(n)
    assert len(orders) == (2 * n if n % 2 else n)
    assert all(sorted(o) == list(range(n)) for o in orders)
    position = {(v, p): 0 for v in range(n) for p in range(n)}
    follows = {(a, b): 0 for a in range(n) for b in range(n) if a != b}
    for o in orders:
        for p, v in enumerate(o):
            position[v, p] += 1
        for a, b in zip(o, o[1:]):
            follows[a, b] += 1
    assert len(set(position.values())) == 1  # every variant in every position alike
    assert len(set(follows.values())) == 1  # every variant right after every other alike
    assert timing.williams_orders(2) == [[0, 1], [1, 0]]  # the A/B's AB, BA


def test_round_robin_runs_the_balanced_order(monkeypatch):
    ran = []
    steps = {k: (lambda k=k: ran.append(k)) for k in "ABC"}
    res = timing.interleaved_round_robin(steps, blocks=6, inner=1, warmup=0, sync=_no_sync)
    seq = "".join(ran)
    blocks = [seq[i:i + 3] for i in range(0, len(seq), 3)]
    orders = ["".join("ABC"[k] for k in o) for o in timing.williams_orders(3)]
    assert blocks == orders
    # a cyclic rotation would put A after C in every block boundary-free triple; here each
    # variant follows each other variant twice within the blocks
    pairs = [b[i:i + 2] for b in blocks for i in range(2)]
    assert {p: pairs.count(p) for p in set(pairs)} == {p: 2 for p in
                                                       ("AB", "AC", "BA", "BC", "CA", "CB")}
    assert all(len(v) == 6 for v in res.block_medians.values())


# ---------------------------------------------------------------- free-running throughput


def test_free_running_overlaps_host_and_device(fake_device):
    """Host and device work of 3 ms each: drained calls pay both, a free-running loop overlaps them."""

    def step():
        time.sleep(0.003)
        fake_device.submit(0.003)

    drained = timing.time_calls(step, warmup=1, repeats=6, sync=fake_device.synchronize)
    free = timing.free_running_ms_per_step(step, steps=8, stretches=3,
                                           sync=fake_device.synchronize)
    assert len(free) == 3 and fake_device.pending == 0
    assert min(drained) >= 6 - EPS_MS
    assert min(free) >= 3 - EPS_MS  # every step's device work is inside its stretch
    assert statistics.median(free) < 0.8 * statistics.median(drained), (free, drained)
