"""E14 (profiler): the contract, the trace, the ranges and the overhead rows in one run.

No test asserts a time or that profiling costs more than zero: this shared
2-core CPU is too noisy for either.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from claims_rows import ab_rows, case, sample_series, with_floor, with_samples
from experiments import assert_outputs_obey_the_contract, one_value, pipeline_results, run_tiny

from perflab import experiments
from perflab.experiments import e14_profiler as e14_slice
from perflab.instruments import phases, profiling, steps, workloads
from perflab.kit import tables

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "e14_profiler.py"


def _execute(tiny_cfg, d: Path, with_trace: bool = True):
    extra = {"trace": str(d / "e14_trace.json.gz")} if with_trace else None
    return run_tiny(tiny_cfg, "E14", d, extra=extra)


@pytest.fixture(scope="module")
def e14(pipeline_run, tiny_cfg):
    """E14 in the shared pipeline run (tests/shared_run.py): (rows, samples, contract, outputs)."""
    return pipeline_results(pipeline_run, tiny_cfg, "E14")


def test_outputs_obey_the_contract(e14):
    rows, samples, _, out = e14
    assert_outputs_obey_the_contract("E14", rows, samples, out)


def test_trace_is_gzip_json_with_the_four_ranges(e14):
    *_, out = e14
    with gzip.open(out["trace"], "rt") as fh:
        trace = json.load(fh)
    events = trace["traceEvents"]
    assert events
    names = {e.get("name") for e in events}
    assert set(profiling.PHASE_RANGES) <= names
    # written atomically: no temp file left beside it
    assert not [p for p in Path(out["trace"]).parent.iterdir() if p.name.endswith(".tmp")]


def test_phase_ranges_cover_the_active_steps(e14):
    rows, _, contract, _ = e14
    active = contract["params"]["active"]
    for name in profiling.PHASE_RANGES:
        sel = rows[(rows.variant == f"range:{name}") & (rows.metric == "range_cpu_time")]
        assert len(sel) == 1
        assert int(sel.n.iloc[0]) == active
        assert sel.value.iloc[0] >= 0
        # a CPU run has no device-time rows, and its windows say the CPU is the device
        assert not ((rows.variant == f"range:{name}")
                    & (rows.metric == "range_device_time")).any()
        assert "the CPU is the device" in sel.window.iloc[0]


def test_top_ops_rows(e14):
    rows, _, contract, _ = e14
    ops = rows[rows.variant.str.startswith("op:")]
    assert 1 <= len(ops) <= contract["params"]["top_ops"]
    assert set(ops.metric) == {"op_self_cpu_time"}
    assert ops.value.tolist() == sorted(ops.value, reverse=True)
    names = {v.removeprefix("op:") for v in ops.variant}
    # ranges and profiler markers are not operators
    assert not names & set(profiling.PHASE_RANGES)
    assert not any(n.startswith("ProfilerStep") for n in names)


def test_profiled_vs_unprofiled_and_overhead(e14):
    rows, samples, contract, _ = e14
    prof = one_value(rows, "profiled", "step_latency", "median")
    plain = one_value(rows, "unprofiled", "step_latency", "median")
    assert one_value(rows, "profiler_overhead", "overhead") == pytest.approx(prof - plain)
    assert one_value(rows, "profiler_overhead", "overhead_rel") == pytest.approx(
        100 * (prof - plain) / plain)
    sessions, active = contract["params"]["sessions"], contract["params"]["active"]
    bracket = max(1, contract["timing"]["repeats"] // (sessions + 1))
    steps = samples[samples.metric == "step_latency"]
    assert (steps.variant == "profiled").sum() == sessions * active
    assert (steps.variant == "unprofiled").sum() == (sessions + 1) * bracket
    # blocks in time order: each session (odd) between two unprofiled brackets (even)
    assert sorted(steps[steps.variant == "profiled"].block.unique()) == \
        list(range(1, 2 * sessions, 2))
    assert sorted(steps[steps.variant == "unprofiled"].block.unique()) == \
        list(range(0, 2 * sessions + 1, 2))
    # the difference is judged as an A/B: its rows are the one A/B writer's
    assert {"wilcoxon_p", "ab_effect", "ab_ci_low", "ab_ci_high"} <= set(
        rows[rows.variant == "profiler_overhead"].metric)


def test_table_and_figure(e14, tmp_path):
    rows, _, _, out = e14
    t = experiments.table("E14", rows)
    assert [f"range {n}" for n in profiling.PHASE_RANGES] == t.measurement.tolist()[:4]
    assert "profiler overhead" in t.measurement.tolist()
    assert not tables.format_table(t).empty
    png = experiments.make_figure("E14", out["csv"], out["samples"], tmp_path / "e14.png")
    assert png.stat().st_size > 0


def test_without_a_trace_output_the_rest_is_written(tiny_cfg, tmp_path):
    # its own run: the pipeline always asks for the trace, this checks a run that does not
    _, out = _execute(tiny_cfg, tmp_path, with_trace=False)
    assert Path(out["csv"]).is_file()
    assert not list(tmp_path.glob("*.gz"))


# ------------------------------------------------------------------ the helpers


def test_time_fields_fall_back_across_torch_versions():
    new = SimpleNamespace(device_time_total=5.0, self_device_time_total=2.0,
                          cpu_time_total=9.0, self_cpu_time_total=3.0)
    old = SimpleNamespace(cuda_time_total=7.0, self_cuda_time_total=1.0)
    assert profiling.device_time_us(new) == 5.0
    assert profiling.device_time_us(new, self_only=True) == 2.0
    assert profiling.device_time_us(old) == 7.0
    assert profiling.device_time_us(old, self_only=True) == 1.0
    assert profiling.device_time_us(SimpleNamespace()) == 0.0
    assert profiling.cpu_time_us(new) == 9.0
    assert profiling.cpu_time_us(new, self_only=True) == 3.0


def test_profile_steps_times_every_step_and_reads_ranges(tmp_path):
    w = workloads.build("mlp", "cpu", dim=16, depth=1, num_classes=4, batch=4)
    step = phases.ranged(steps.build(w, "cpu"), profiling.PHASE_RANGES)
    run = profiling.profile_steps(step, device="cpu", sync=lambda: None, wait=1, warmup=1,
                                  active=3)
    assert len(run.step_ms) == 5 and len(run.active_ms) == 3
    assert not run.device_activity
    ranges = profiling.range_times(run.prof)
    assert {r.count for r in ranges.values()} == {3}
    assert all(r.device_ms is None for r in ranges.values())
    ops = profiling.top_ops(run.prof, 3, by_device=False)
    assert 1 <= len(ops) <= 3 and all(o.calls >= 1 for o in ops)
    path = profiling.export_trace_gz(run.prof, tmp_path / "t.json.gz")
    with gzip.open(path, "rt") as fh:
        assert "traceEvents" in json.load(fh)


# ------------------------------------------------------------------ the claims' cases
# C33, C34: rows where each finding holds, fails, and sits inside the noise
# (claims_rows.case); tests/test_claim_cases.py runs every claim's cases


def e14_overhead(rel, p=0.001, ci_pct=3.0, floor_pct=2.0, base=16.5):
    """E14's profiled sessions against their brackets as an A/B of ``rel`` % (Wilcoxon p
    over the sessions, bootstrap interval +- ``ci_pct`` %), under C00's A/A floor."""
    return with_floor(floor_pct, *ab_rows("E14", e14_slice.PROFILER_OVERHEAD, rel,
                                          metric=e14_slice.OVERHEAD, base_ms=base, p=p,
                                          ci_pct=ci_pct))


# +58%; 6% faster profiled, every session agreeing (decided); +3% with p 0.3 over 6 sessions
case("C33", lambda: e14_overhead(58.0), lambda: e14_overhead(-6.0),
     lambda: e14_overhead(3.0, p=0.3))


def e05_phases(**ms):
    """E05's synchronized phases: {phase: (median ms, IQR ms)}; shares from the medians."""
    total = sum(m for m, _ in ms.values())
    specs = []
    for ph, (m, iqr) in ms.items():
        specs += [("E05", f"sync/{ph}", "phase_time", "median", m),
                  ("E05", f"sync/{ph}", "phase_time", "iqr", iqr),
                  ("E05", f"sync/{ph}", "phase_share", "value", 100 * m / total)]
    return specs


def e14_ranges(floor_pct=2.0, top="optimizer", **ms):
    ranges = {"forward": 33.6, "backward": 78.5, "optimizer": 114.7}
    if top != "optimizer":
        ranges[top], ranges["optimizer"] = ranges["optimizer"], ranges[top]
    ranges.update(ms)
    timed = {"forward": (2.9, 0.1), "backward": (4.7, 0.2), "optimizer": (8.4, 0.2)}
    phases = e05_phases(**timed)
    frame = with_floor(floor_pct, *phases, *[("E14", e14_slice.range_variant(r),
                                              e14_slice.RANGE_DEVICE_TIME, "value", x)
                                             for r, x in ranges.items()])
    # E05's steps: its lead is judged by the interval of the two medians' difference
    return with_samples(frame, *[("E05", f"sync/{ph}", "phase_time",
                                  sample_series(m, iqr / 1.349, 400, k))
                                 for k, (ph, (m, iqr)) in enumerate(timed.items())])


case("C34", e14_ranges, lambda: e14_ranges(top="backward"),
     lambda: e14_ranges(backward=113.5))  # the profiler's top two within the floor
