"""The largest batch sizes judged by their own between-process floor (C19).

The run's between-process floor comes from the host-bound controlled step's processes
(25% on the H200 across one run's jobs); the largest batches are device-bound, and two runs'
processes of batch 1024 and 2048 agreed within 0.3-0.8%. With ``replicate_largest`` E08
replicates them, and a comparison between two replicated sizes is judged by their own pooled
floor; any other comparison keeps the run's.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from claims_rows import rows, verdict
from test_e08_batch_sweep import e08_rows

from perflab.experiments import e08_batch_sweep as e08
from perflab.experiments.e08_batch_sweep import sweep
from perflab.instruments import stats
from perflab.kit import claims

BATCHES = (32, 64, 1024, 2048)


def replicated(frame: pd.DataFrame, sizes, floor_pct: float, n: int = 6) -> pd.DataFrame:
    """``frame`` plus one replicate of each of ``sizes`` and E08's own throughput floor."""
    specs = [("E08", e08.replicate_variant(b, 1), "throughput", "median", 1.0) for b in sizes]
    specs.append(("E08", e08.floor_variant("throughput"), e08.PROCESS_FLOOR, "value", floor_pct))
    extra = rows(*specs)
    extra.loc[extra.metric == e08.PROCESS_FLOOR, "n"] = n
    return pd.concat([frame, extra], ignore_index=True)


def c19(throughput, run_floor=25.0, sizes=None, own=2.0):
    frame = e08_rows(throughput=throughput, batches=BATCHES, floor_pct=run_floor)
    return verdict("C19", replicated(frame, sizes, own) if sizes else frame)


H200 = (10762, 19350, 178298, 201486)  # examples/s of the shipped H200 run: +13% at the top


def test_the_top_step_inside_the_run_floor_is_not_resolved():
    v = c19(H200)
    assert v.verdict == claims.INCONCLUSIVE
    assert "between-process floor 25%" in v.measured


def test_replicated_largest_batches_decide_it_by_their_own_floor():
    v = c19(H200, sizes=(1024, 2048))
    assert v.verdict == claims.REPRODUCED, v.measured
    assert "E08's throughput over 6 processes of batch 1024, 2048" in v.measured
    # the rise from the smallest batch is not between replicated sizes: the run's floor
    assert "between-process floor 25%" in v.measured


def test_the_largest_batch_falling_beyond_its_own_floor_differs():
    v = c19((10762, 19350, 178298, 165000), sizes=(1024, 2048))
    assert v.verdict == claims.DIFFERS, v.measured
    # inside that floor it is not resolved
    v = c19((10762, 19350, 178298, 176000), sizes=(1024, 2048), own=3.0)
    assert v.verdict == claims.INCONCLUSIVE, v.measured


def test_one_size_replicated_keeps_the_run_floor():
    v = c19(H200, sizes=(2048,))
    assert v.verdict == claims.INCONCLUSIVE
    assert "E08's throughput" not in v.measured


def test_the_largest_swept_sizes_are_replicated():
    c = {"workload": "mlp", "workloads": {"mlp": {"params": {"batch": 256}}},
         "params": {"batches": [2048, 32, 256, 1024], "replicates": 2, "replicate_largest": 2}}
    assert sweep.replicated_batches(c) == [1024, 2048]
    assert sweep.jobs(c)[4:] == [(1024, 1), (2048, 1), (1024, 2), (2048, 2)]
    # neither how many nor which enter a job's contract: adding them reruns no measured job
    assert "replicate_largest" not in sweep.batch_contract(c, 1024, 1)["params"]
    c["params"]["replicate_largest"] = 0
    assert sweep.replicated_batches(c) == [256]


def test_pooled_floor_is_one_groups_when_alone_and_pools_the_degrees_of_freedom():
    a, b = [3.0, 3.1, 2.95], [10.5, 10.4, 10.6]
    la = np.log(a)
    one = 100 * np.expm1(4.302653 * np.sqrt(2) * la.std(ddof=1))  # t(0.975, 2) = 4.3027
    assert stats.process_floor_pct(a) == pytest.approx(one, rel=1e-5)
    # one spread from both groups, each about its own mean: not the spread of all six
    lb = np.log(b)
    s = np.sqrt((((la - la.mean()) ** 2).sum() + ((lb - lb.mean()) ** 2).sum()) / 4)
    from scipy.stats import t
    want = 100 * np.expm1(t.ppf(0.975, 4) * np.sqrt(2) * s)
    assert stats.process_floor_pct(a, b) == pytest.approx(want)
    with pytest.raises(ValueError, match="at least two"):
        stats.process_floor_pct(a, [10.5])


def test_pooled_floor_false_positive_rate_is_5_percent():
    # two contracts (batch sizes) with one process-to-process spread and different medians:
    # a further pair of processes of either lands outside the pooled floor 5% of the time
    # (exactly, for a normal log statistic: (ln x - ln y) / (s sqrt 2) is t with df 4); 8000
    # seeded runs measure it within +-0.5 points (2 standard errors)
    rng = np.random.default_rng(7)
    runs, sd = 8000, 0.01
    g1 = 5.97 * np.exp(rng.normal(0, sd, (runs, 3)))
    g2 = 10.5 * np.exp(rng.normal(0, sd, (runs, 3)))
    floors = np.array([stats.process_floor_pct(a, b) for a, b in zip(g1, g2)])
    x, y = (10.5 * np.exp(rng.normal(0, sd, (2, runs))))
    rate = np.mean(np.abs(100 * (y / x - 1)) > floors)
    assert 0.04 <= rate <= 0.055, rate
    # the spread of all six about one mean would count the sizes' difference as noise
    wide = np.array([stats.process_floor_pct(np.r_[a, b]) for a, b in zip(g1[:50], g2[:50])])
    assert (wide > 10 * floors[:50]).all()


def test_every_step_is_judged_not_only_the_smallest():
    # the top step is decided by the replicated sizes' own floor, but 64 -> 1024 (+30%)
    # lies inside a run floor of 40% (35 points from the -5% allowed): not every step is
    # decided, so neither is the claim (one H200 host's run floor was 84%)
    v = c19((10762, 19350, 25155, 28400), run_floor=40.0, sizes=(1024, 2048))
    assert v.verdict == claims.INCONCLUSIVE, v.measured
    assert "step up +30.0% (64 -> 1024)" in v.measured
    # a step decided below the dip is named whatever the others
    v = c19((10762, 19350, 9000, 28400), run_floor=3.0, sizes=(1024, 2048))
    assert v.verdict == claims.DIFFERS and "(64 -> 1024)" in v.measured
