"""Shared checks of the memory experiments' tests (E09-E12)."""

from __future__ import annotations

import pytest

from perflab.pipeline import config

CUDA_CONFIG_OVERRIDES = {"device": "cuda"}


def assert_rows_honest(eid: str, rows) -> None:
    """Every row of ``eid``; ok rows carry a value, every other row a reason."""
    assert (rows.experiment == eid).all()
    assert set(rows.status) <= {"ok", "unsupported", "oom"}
    assert (rows.status == "ok").any()
    bad = rows[(rows.status != "ok") & (rows.reason.str.len() == 0)]
    assert bad.empty, bad[["variant", "metric"]]
    assert (rows.window.str.len() > 0).all() and (rows.sync_boundary.str.len() > 0).all()


def value(rows, variant: str, metric: str, statistic: str = "value") -> float:
    sel = rows[(rows.variant == variant) & (rows.metric == metric)
               & (rows.statistic == statistic) & (rows.status == "ok")]
    assert len(sel) == 1, (variant, metric, len(sel))
    return float(sel.value.iloc[0])


def status(rows, variant: str, metric: str) -> str:
    sel = rows[(rows.variant == variant) & (rows.metric == metric)]
    assert len(sel) == 1, (variant, metric, len(sel))
    return sel.status.iloc[0]


def cuda_cfg():
    """The test contract on CUDA; skips the test on a machine without it."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device (run on the GPU machine)")
    from conftest import TEST_CONFIG

    return config.load([TEST_CONFIG], CUDA_CONFIG_OVERRIDES)


def run_rows(cfg: dict, eid: str, out_dir, **kw):
    """Run ``eid`` (tests/experiments.run_tiny); returns (rows, contract, outputs)."""
    from experiments import run_tiny

    from perflab.core import io

    contract, out = run_tiny(cfg, eid, out_dir, **kw)
    return io.read_results([out["csv"]]), contract, out


def run_fake_cuda(cfg: dict, eid: str, out_dir, monkeypatch, prepare=None, **kw):
    """Run ``eid``'s CUDA branch against tests/fake_cuda.py (``prepare(module)`` first;
    ``kw`` to run_tiny)."""
    import fake_cuda
    from experiments import load_script

    from perflab.experiments.catalogue import EXPERIMENTS

    fake_cuda.patch(monkeypatch)
    mod = load_script(EXPERIMENTS[eid].slug)
    if prepare is not None:
        prepare(mod)
    return run_rows(cfg, eid, out_dir, measure=fake_cuda.as_cuda(mod.measure), **kw)
