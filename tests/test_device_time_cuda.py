"""Device time on a real GPU: events with the device kept ahead exclude the host's launch gaps.

Skipped without CUDA. Each test asserts properties of one run (ratios, orderings),
never absolute times: a step with a planted host delay between small kernels must
read device time far below its wall clock (while events on an idle stream track
the wall clock), and a device-bound step of large matmuls must read device time
within a few % of it.
"""

from __future__ import annotations

import statistics
import time

import pytest
import torch

from perflab.core import io
from perflab.instruments import timing
from perflab.kit import tables

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_sleep_lasts_what_it_was_asked():
    clock = timing.CudaClock("cuda")
    clock.sleep(1.0)  # calibrates once per process
    ms = []
    for _ in range(5):
        start, end = clock.event(), clock.event()
        clock.sync()
        start.record()
        clock.sleep(5.0)
        end.record()
        end.synchronize()
        ms.append(start.elapsed_time(end))
    assert 0.75 * 5.0 < statistics.median(ms) < 1.25 * 5.0, ms


def test_planted_host_delay_is_not_device_time():
    x = torch.randn(4096, device="cuda")

    def step():  # five tiny kernels, the host busy 1 ms between launches
        for i in range(5):
            if i:
                time.sleep(0.001)
            x.mul_(1.0001)

    res = timing.time_wall_and_device(step, warmup=5, repeats=30, device="cuda")
    wall = statistics.median(res.wall_ms)
    assert wall > 4.0  # the four planted gaps are in the wall clock
    assert statistics.median(res.device_ms) < 0.2 * wall, (res.device_ms, wall)
    # the idle-stream instrument (start event fired at submission) includes the gaps
    assert statistics.median(res.idle_events_ms) > 0.8 * wall, (res.idle_events_ms, wall)


def test_device_bound_step_device_time_is_within_a_few_percent_of_wall():
    a = torch.randn(4096, 4096, device="cuda")

    def step():
        for _ in range(4):
            a @ a

    res = timing.time_wall_and_device(step, warmup=5, repeats=30, device="cuda")
    wall, device = statistics.median(res.wall_ms), statistics.median(res.device_ms)
    assert abs(wall - device) < 0.03 * wall, (wall, device)
    assert res.behind == 0


def test_a_step_that_reads_the_device_cannot_be_put_ahead():
    x = torch.randn(4096, device="cuda")
    with pytest.raises(timing.Unsupported, match="waits for the device"):
        timing.time_wall_and_device(lambda: x.sum().item(), warmup=2, repeats=3, device="cuda")


def test_e06_job_on_cuda(tmp_path):
    from experiments import run_tiny
    from memory_checks import cuda_cfg

    from perflab.experiments import e06_events_vs_wall as e06

    _, out = run_tiny(cuda_cfg(), "E06", tmp_path)
    rows = io.read_results([out["csv"]])
    assert (rows.status == "ok").all(), rows[rows.status != "ok"].reason.tolist()
    wall = tables.pick(rows, *e06.WALL)
    device = tables.pick(rows, *e06.DEVICE)
    gap = tables.pick(rows, *e06.HOST_EXPOSED)
    assert 0 < device <= wall * 1.05
    assert -0.05 * wall < gap < wall
    share = tables.pick(rows, *e06.HOST_EXPOSED_SHARE, "value")
    assert share == pytest.approx(100 * gap / wall)
