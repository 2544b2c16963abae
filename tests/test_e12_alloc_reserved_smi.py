"""E12 (allocated / reserved / NVML): the four states, the two deltas, honest CPU rows.

On the CPU the allocator and NVML rows are ``unsupported`` and the RSS around
the large tensor is measured; the chapter's two properties (del does not move
reserved, empty_cache does not move allocated) need CUDA and are checked there.
"""

from __future__ import annotations

import pytest
from claims_rows import case, rows
from experiments import pipeline_results
from memory_checks import assert_rows_honest, cuda_cfg, run_fake_cuda, run_rows, status, value

from perflab import experiments
from perflab.experiments import e12_alloc_reserved_smi as e12_slice

STATES = ("steady", "after_alloc", "after_del", "after_empty_cache")


@pytest.fixture(scope="module")
def e12(pipeline_run, tiny_cfg):
    # the shared pipeline run's outputs (tests/shared_run.py): the experiment is not run again
    rows, _, contract, out = pipeline_results(pipeline_run, tiny_cfg, "E12")
    return rows, contract, out


def test_cpu_rows_are_honest(e12):
    rows, *_ = e12
    assert_rows_honest("E12", rows)
    for state in STATES:
        for metric in ("allocated", "reserved", "max_reserved", "nvml_process"):
            assert status(rows, state, metric) == "unsupported"
    assert status(rows, "after_empty_cache", "rss") == "unsupported"


def test_rss_sees_the_written_tensor_and_deltas_add_up(e12):
    rows, contract, _ = e12
    big = contract["params"]["big_mib"]
    grew = value(rows, "after_alloc", "rss") - value(rows, "steady", "rss")
    assert grew >= 0.9 * big  # torch.ones wrote every page
    assert value(rows, "delta/del", "rss") == pytest.approx(
        value(rows, "after_del", "rss") - value(rows, "after_alloc", "rss"))


def test_table_and_figure(e12, tmp_path):
    rows, _, out = e12
    t = experiments.table("E12", rows)
    assert len(t) == 6 and {"allocated_mib", "reserved_mib", "rss_mib"} <= set(t.columns)
    assert experiments.make_figure("E12", out["csv"], out["samples"], tmp_path / "e12.png").is_file()


def test_cuda_branch_writes_every_counter_row(tiny_cfg, tmp_path, monkeypatch):
    """The CUDA code path against a fake allocator: rows and deltas, no memory claim."""
    rows, *_ = run_fake_cuda(tiny_cfg, "E12", tmp_path, monkeypatch)
    assert_rows_honest("E12", rows)
    for state in STATES:
        for metric in ("allocated", "reserved", "max_reserved"):
            assert status(rows, state, metric) == "ok"
        assert status(rows, state, "nvml_process") == "unsupported"  # the fake has no NVML
    assert value(rows, "delta/empty_cache", "allocated") == pytest.approx(
        value(rows, "after_empty_cache", "allocated") - value(rows, "after_del", "allocated"))


def test_cuda_del_moves_allocated_not_reserved_and_empty_cache_the_reverse(tmp_path):
    cfg = cuda_cfg()
    # the tensor must need a segment of its own: the tiny contract's 16 MiB fits in the free
    # part of the step's reserved pool (seen on an H200: reserved stayed at 98 MiB), and then
    # empty_cache has nothing to return. 256 MiB exceeds any pool the tiny step reserves.
    cfg["experiments"]["E12"]["big_mib"] = 256
    rows, contract, _ = run_rows(cfg, "E12", tmp_path)
    big = contract["params"]["big_mib"]
    assert value(rows, "delta/del", "allocated") == pytest.approx(-big, abs=0.01)
    assert value(rows, "delta/del", "reserved") == 0.0
    assert value(rows, "delta/empty_cache", "allocated") == 0.0
    assert value(rows, "delta/empty_cache", "reserved") <= -big + 0.01
    # a high-water mark: empty_cache leaves it where the large tensor put it
    assert value(rows, "after_empty_cache", "max_reserved") == value(rows, "after_del",
                                                                      "max_reserved")


# ------------------------------------------------------------------ the claims' cases
# C29: rows where each finding holds, fails, and sits inside the noise
# (claims_rows.case); tests/test_claim_cases.py runs every claim's cases


def e12_rows(reserved_after_del=1064.0):
    a = {e12_slice.AFTER_ALLOC: 874.0, e12_slice.AFTER_DEL: 474.0,
         e12_slice.AFTER_EMPTY_CACHE: 474.0}
    r = {e12_slice.AFTER_ALLOC: 1064.0, e12_slice.AFTER_DEL: reserved_after_del,
         e12_slice.AFTER_EMPTY_CACHE: 542.0}
    return rows(*[("E12", v, e12_slice.ALLOCATED, "value", x) for v, x in a.items()],
                *[("E12", v, e12_slice.RESERVED, "value", x) for v, x in r.items()])


case("C29", e12_rows, lambda: e12_rows(reserved_after_del=700.0))  # del returned memory


# ------------------------------------------------------------------ a size the device cannot hold

HUGE_MIB = 10**9  # a petabyte: no host or device holds it


def _huge(contract):
    contract["params"]["big_mib"] = HUGE_MIB


def _assert_oom_after_the_steady_state(rows, metrics, why):
    """The steady state measured; every later reading of ``metrics`` an oom row naming the size
    and why."""
    assert_rows_honest("E12", rows)
    for metric in metrics:
        assert status(rows, "steady", metric) == "ok"
        for state in ("after_alloc", "after_del", "delta/del"):
            row = rows[(rows.variant == state) & (rows.metric == metric)].iloc[0]
            assert row.status == "oom", (state, metric, row.status)
            assert f"{HUGE_MIB} MiB" in row.reason and why in row.reason, row.reason


def test_a_size_the_host_cannot_hold_is_oom_rows_not_a_dead_job(tiny_cfg, tmp_path):
    """On a CPU a size over MemAvailable is not even tried (the OOM killer, not the allocator,
    would answer); the table, figure and C29 read the rows as not measured."""
    from claims_rows import verdict

    from perflab.kit import claims

    rows, _, out = run_rows(tiny_cfg, "E12", tmp_path, patch=_huge)
    _assert_oom_after_the_steady_state(rows, ["rss"], "more than this host has available")
    # empty_cache has no CPU state: unsupported, whatever the size
    assert status(rows, "after_empty_cache", "rss") == "unsupported"
    assert status(rows, "delta/empty_cache", "rss") == "unsupported"
    assert status(rows, "delta/del", "allocated") == "unsupported"  # no allocator on a CPU
    t = experiments.table("E12", rows).set_index("state")
    assert t.loc["after allocating the large tensor", "rss_mib"] == "oom"
    assert f"{HUGE_MIB} MiB" in t.loc["after allocating the large tensor", "note"]
    assert t.loc["moved by del", "allocated_mib"] == "unsupported"
    assert experiments.make_figure("E12", out["csv"], out["samples"], tmp_path / "e12.png").is_file()
    assert verdict("C29", rows).verdict == claims.UNSUPPORTED  # a CPU has no allocator


def test_the_allocators_own_failure_is_an_oom_row(tiny_cfg, tmp_path, monkeypatch):
    """Where the available memory cannot be read, the allocation is tried: the CPU
    allocator's RuntimeError ("can't allocate memory") becomes the rows, on CUDA's path too
    (fake allocator), and C29 is undecided, not DIFFERS."""
    from claims_rows import verdict

    from perflab.core import env
    from perflab.kit import claims

    monkeypatch.setattr(env, "host_memory_mib", lambda field="MemTotal": None)
    (tmp_path / "cpu").mkdir(), (tmp_path / "cuda").mkdir()
    rows, *_ = run_rows(tiny_cfg, "E12", tmp_path / "cpu", patch=_huge)
    _assert_oom_after_the_steady_state(rows, ["rss"], "can't allocate memory")

    rows, *_ = run_fake_cuda(tiny_cfg, "E12", tmp_path / "cuda", monkeypatch, patch=_huge)
    counters = ["allocated", "reserved", "max_reserved"]
    _assert_oom_after_the_steady_state(rows, counters, "ran out of memory")
    assert status(rows, "after_empty_cache", "allocated") == "oom"
    assert status(rows, "after_alloc", "nvml_process") == "oom"
    v = verdict("C29", rows)
    assert v.verdict == claims.INCONCLUSIVE and f"{HUGE_MIB} MiB" in v.measured, v


def test_on_cuda_the_config_refuses_a_size_beyond_the_largest_gpu_where_nvml_answers(monkeypatch):
    """NVML's largest GPU bounds big_mib; no NVML, or a submit host: left to the job's rows."""
    from perflab.core import env
    from perflab.experiments import ConfigProblem, ConfigView
    from perflab.experiments import e12_alloc_reserved_smi as e12

    def view(check_device=True, selected=("E12",)):
        return ConfigView(device="cuda:0", check_device=check_device, visible_cuda=1,
                          selected=selected, contract=lambda eid: {"params": {"big_mib": 2000}})

    monkeypatch.setattr(env, "nvml_largest_device_mib", lambda: 1000.0)
    with pytest.raises(ConfigProblem, match="2000 MiB is more than the largest GPU here holds "
                                            "1000 MiB") as exc:
        e12.check_config({}, view())
    assert exc.value.key == "experiments.E12.big_mib"
    e12.check_config({}, view(check_device=False))  # the GPU is on another node
    e12.check_config({}, view(selected=("E01",)))
    monkeypatch.setattr(env, "nvml_largest_device_mib", lambda: None)
    e12.check_config({}, view())


def test_cuda_a_size_the_device_cannot_hold_is_oom_rows(tmp_path):
    """On the GPU: the whole device's memory cannot be allocated next to the CUDA context and
    the step, so the allocator's OutOfMemoryError becomes the rows."""
    import torch

    cfg = cuda_cfg()
    total_mib = torch.cuda.get_device_properties(0).total_memory // 2**20
    cfg["experiments"]["E12"]["big_mib"] = int(total_mib)
    rows, *_ = run_rows(cfg, "E12", tmp_path)
    assert_rows_honest("E12", rows)
    for metric in ("allocated", "reserved", "max_reserved"):
        assert status(rows, "steady", metric) == "ok"
        for state in ("after_alloc", "after_del", "after_empty_cache", "delta/del"):
            row = rows[(rows.variant == state) & (rows.metric == metric)].iloc[0]
            assert row.status == "oom" and f"{total_mib} MiB" in row.reason, row
            assert "Tried to allocate" in row.reason, row.reason  # the allocator's own words
