"""perflab.timing against a fake asynchronous device (no CUDA needed).

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

from perflab import timing

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
    assert rec.events == ["sync", "clock", "fn", "clock"] * 2 + ["sync"]


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
    host = timing.host_return_samples(step, repeats=5, sync=fake_device.synchronize)
    assert fake_device.pending == 0  # drained before returning
    done = timing.time_calls(step, warmup=0, repeats=5, sync=fake_device.synchronize)
    assert len(host) == len(done) == 5
    assert min(done) >= WORK_MS - EPS_MS
    assert statistics.median(host) < min(done) / 4, (host, done)


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
        timing.time_cuda_events(lambda: called.append(1), warmup=1, repeats=1, device="cpu")
    assert called == []
    assert issubclass(timing.Unsupported, RuntimeError)
    with pytest.raises(timing.Unsupported):
        timing.time_wall_and_events(lambda: called.append(1), warmup=1, repeats=1, device="cpu")
    assert called == []


def test_timer_blocked_autorange_on_cheap_callable():
    import torch

    x = torch.ones(16)
    r = timing.timer_blocked_autorange(lambda: x.add(1), min_run_time=0.05)
    assert set(r) >= {"median_ms", "iqr_ms", "mean_ms", "number_per_run", "runs", "times_ms"}
    assert r["median_ms"] > 0
    assert r["iqr_ms"] >= 0
    assert r["number_per_run"] >= 1
    assert r["runs"] >= 1
    assert len(r["times_ms"]) == r["runs"]
    assert all(t > 0 for t in r["times_ms"])
    assert min(r["times_ms"]) <= r["median_ms"] <= max(r["times_ms"])
