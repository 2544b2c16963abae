"""C19-C21 judged by E08's interleaved job: every batch size in one process, round robin.

The per-batch jobs are separate processes, judged against the between-process floor (84% in
one H200 run: its first jobs ran slower than the later ones), which left C19 and C20
undecided. With the interleaved series each comparison is of sizes measured together, by the
95% interval of its own statistic; the process floor no longer enters. Each claim: the
finding holds, fails, and is inside the noise; a size without its series falls back.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from claims_rows import rows, sample_series, verdict, with_samples
from test_e08_batch_sweep import e08_rows

from perflab.experiments import e08_batch_sweep as e08
from perflab.kit import claims

BATCHES = (32, 64, 128, 2048)
#: the per-batch processes' medians (ms), as one slow-then-fast H200 run read them
PROCESSES = (3.99, 2.95, 3.89, 10.6)


def interleaved(latency, free=None, *, sd_pct=1.0, blocks=10, inner=10, floor_pct=84.0,
                batches=BATCHES, lowest=64, highest=2048, drop=()):
    """E08's per-batch rows (their process floor ``floor_pct``) plus the interleaved job's:
    per size its calls' median (``latency``, ms), its free-running ms per step (``free``,
    default the latency) and the throughput from it, each series spread by ``sd_pct``."""
    free = free or latency
    frame = e08_rows(latency=PROCESSES, batches=batches, floor_pct=floor_pct,
                     lowest=lowest, highest=highest, peaks=(800.0,) * len(batches))
    specs, series = [], []
    for i, (b, ms, f) in enumerate(zip(batches, latency, free)):
        if b in drop:
            continue
        v = e08.interleaved_variant(b)
        specs += [("E08", v, "step_latency", "median", ms),
                  ("E08", v, e08.FREE_RUNNING_STEP, "median", f),
                  ("E08", v, "throughput", "median", b / f * 1e3)]
        series += [("E08", v, "step_latency", sample_series(ms, ms * sd_pct / 100,
                                                             blocks * inner, seed=i)),
                   ("E08", v, e08.FREE_RUNNING_STEP, sample_series(f, f * sd_pct / 100,
                                                                   blocks, seed=10 + i))]
    return with_samples(pd.concat([frame, rows(*specs)], ignore_index=True), *series)


def test_c20_flat_latency_holds_by_its_own_interval_under_a_wide_process_floor():
    v = verdict("C20", interleaved((3.95, 3.93, 3.97, 10.6)))
    assert v.verdict == claims.REPRODUCED, v.measured
    assert e08.TOGETHER in v.measured and "between-process" not in v.measured
    assert "3.950 ms at 32 vs 3.970 ms at 128" in v.measured


def test_c20_latency_rising_from_the_smallest_batch_differs():
    v = verdict("C20", interleaved((3.0, 3.6, 4.2, 10.6)))
    assert v.verdict == claims.DIFFERS, v.measured


def test_c20_a_rise_at_the_threshold_within_the_spread_is_inconclusive():
    v = verdict("C20", interleaved((4.0, 4.2, 4.38, 10.6), sd_pct=15.0))
    assert v.verdict == claims.INCONCLUSIVE, v.measured


def test_c19_throughput_rising_to_the_largest_batch_holds():
    v = verdict("C19", interleaved((3.9, 3.9, 3.9, 10.2)))
    assert v.verdict == claims.REPRODUCED, v.measured
    assert e08.TOGETHER in v.measured


def test_c19_the_largest_batch_falling_behind_differs():
    # 2048 at 80 ms a step: 25600 examples/s against 128's 32800
    v = verdict("C19", interleaved((3.9, 3.9, 3.9, 80.0)))
    assert v.verdict == claims.DIFFERS, v.measured
    assert "the largest batch is the fastest" in v.mechanism or "peaks at batch 128" in v.mechanism


def test_c19_a_step_down_decided_beyond_the_dip_differs_even_if_the_rest_rises():
    # 64 -> 128 falls 25% (128 at 10.4 ms), the top still leads
    v = verdict("C19", interleaved((3.9, 3.9, 10.4, 20.0)))
    assert v.verdict == claims.DIFFERS, v.measured
    assert "64 -> 128" in v.measured


def test_c19_a_top_lead_inside_the_blocks_spread_is_inconclusive():
    # 2048 leads 128 by +0.5% with stretches spread 10% over 10 blocks
    free = (3.9, 3.9, 3.9 * 0.995, 3.9 * 16 * 0.995 / 1.005)
    v = verdict("C19", interleaved(free, free, sd_pct=10.0))
    assert v.verdict == claims.INCONCLUSIVE, v.measured


def test_c21_the_throughput_batch_past_the_knee_holds_and_one_batch_for_both_differs():
    assert verdict("C21", interleaved((3.9, 3.8, 3.9, 10.6))).verdict == claims.REPRODUCED
    # the highest-throughput batch is the lowest-latency one: 0%, decided
    v = verdict("C21", interleaved((3.9, 3.8, 3.9, 10.6), highest=64))
    assert v.verdict == claims.DIFFERS, v.measured
    v = verdict("C21", interleaved((3.9, 3.8, 3.9, 4.19), sd_pct=15.0))
    assert v.verdict == claims.INCONCLUSIVE, v.measured


@pytest.mark.parametrize("cid", ["C19", "C20", "C21"])
def test_a_size_without_its_interleaved_series_falls_back_to_the_process_floor(cid):
    """A size that did not fit beside the others (or a run before the job): the separate
    processes are judged, against the between-process floor, as before."""
    v = verdict(cid, interleaved((3.95, 3.93, 3.97, 10.6), drop=(2048, 32)))
    assert e08.TOGETHER not in v.measured
    assert "between-process floor 84%" in v.measured


def test_too_few_blocks_give_no_interval_and_fall_back():
    v = verdict("C20", interleaved((3.95, 3.93, 3.97, 10.6), blocks=2, inner=1))
    assert e08.TOGETHER not in v.measured and v.verdict == claims.INCONCLUSIVE


def test_the_interval_resamples_the_sizes_together():
    """A drift common to every size (a block slower for all) leaves the ratio decided:
    the sizes' samples in one block are resampled as one."""
    frame = interleaved((3.95, 3.93, 3.97, 10.6), sd_pct=0.5)
    s = frame.attrs["samples"]
    drift = np.repeat(np.linspace(1.0, 1.5, 10), 10)  # every size 50% slower by the end
    lat = s.metric == "step_latency"
    for v in s[lat].variant.unique():
        sel = lat & (s.variant == v)
        s.loc[sel, "value"] = s.loc[sel, "value"].to_numpy() * drift
    assert verdict("C20", frame).verdict == claims.REPRODUCED
