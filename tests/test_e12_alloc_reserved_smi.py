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
