"""perflab.instruments.compiler_watch: what torch.compile did, read from Dynamo, with its cause named."""

from __future__ import annotations

import pytest
import torch

from perflab.instruments.compiler_watch import CompilerReport, CompilerWatch


@pytest.fixture
def limit(monkeypatch):
    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 3)
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_a_new_size_every_call_recompiles_to_the_limit_then_runs_eager(limit):
    f = torch.compile(lambda x: (x * 2).sum(), dynamic=False, backend="eager")
    with CompilerWatch() as watch:
        for n in range(1, 7):
            f(torch.randn(n, 4))
    r = watch.report
    assert r.graphs == 3 and r.recompiles >= 2 and r.eager_fallback
    assert "size mismatch at index 0" in r.reasons[0]
    assert "batch size of x (its dimension 0)" in r.cause() and "drop_last" in r.fix()


def test_one_size_compiles_once_and_nothing_is_a_fallback(limit):
    f = torch.compile(lambda x: (x * 2).sum(), dynamic=False, backend="eager")
    with CompilerWatch() as watch:
        for _ in range(4):
            f(torch.randn(2, 4))
    r = watch.report
    assert (r.graphs, r.recompiles, r.eager_fallback, r.cause()) == (1, 0, False, "")
    with CompilerWatch() as idle:  # nothing compiled inside: an empty report
        torch.randn(3).sum()
    assert not idle.report.compiled


@pytest.mark.parametrize("reason, cause, fix", [
    ("0/1: tensor 'L['x']' size mismatch at index 1. expected 8, actual 9",
     "sequence length", "bucketed padding"),
    ("0/0: L['self'].training == True", "train/eval", "separately"),
    ("0/2: L['scale'] == 0.5", "Python scalar", "as a tensor"),
])
def test_each_cause_in_the_users_terms(reason, cause, fix):
    r = CompilerReport(graphs=2, frames=2, recompiles=1, reasons=[reason])
    assert cause in r.cause() and fix in r.fix()
