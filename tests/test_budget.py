"""perflab diagnose --budget: parsing, the split, the sampling contract, and the adaptive
loop E05 samples its deciding shares in (issue 40). Counts and ordering, never times."""

import itertools

import numpy as np
import pytest
import yaml

from perflab.instruments import budgeted
from perflab.kit import sampling
from perflab.pipeline import budget
from perflab.pipeline import config as cfgmod


def test_cli_rejects_a_bad_budget_in_one_line(capsys):
    from perflab import cli

    with pytest.raises(SystemExit):
        cli.parser().parse_args(["diagnose", "mlp", "--budget", "1.5x"])
    err = capsys.readouterr().err.strip().splitlines()
    assert "--budget" in err[-1] and "1.5x" in err[-1]


FIXED = {"C00": 30.0, "E05": 60.0, "R01": 5.0, "R02": 2.0}


def test_split_sums_to_the_budget_and_reserves_fixed_jobs():
    shares = budget.split(60.0, FIXED, start_each_s=2.0, other_jobs=2)
    assert sum(shares.values()) == pytest.approx(60.0)
    assert shares["start-up"] == pytest.approx(2.0 * 6)
    # the jobs that run a fixed count get what it takes; the adaptive ones share the rest
    assert shares["R01"] == 5.0 and shares["R02"] == 2.0
    assert shares["E05"] == pytest.approx(2 * shares["C00"])
    assert list(shares) == ["start-up", *FIXED]


def test_split_too_small_a_budget_says_how_much():
    with pytest.raises(budget.BudgetError, match="at least"):
        budget.split(10.0, FIXED, start_each_s=2.0, other_jobs=2)


def test_the_split_is_printed_and_the_estimate_does_not_exceed_fixed():
    shares = budget.split(300.0, FIXED, start_each_s=2.0, other_jobs=2)
    est = budget.estimate_s(shares, FIXED)
    # a budget above what the fixed counts take: each job stops at its fixed time at most
    assert est == pytest.approx(12.0 + sum(FIXED.values()))
    line = budget.line(310.0, shares, 10.0, est)
    assert line.startswith("budget 310 s: pre-flight 10 s (spent), start-up 12 s, C00 ")
    assert all(e in line for e in FIXED)


def test_write_config_is_read_by_the_sampling_accessors(tmp_path):
    shares = budget.split(60.0, FIXED, start_each_s=2.0, other_jobs=2)
    path = tmp_path / "sampling.yaml"
    budget.write_config(path, shares, 60.0)
    cfg = yaml.safe_load(path.read_text())
    assert sampling.rule(cfg) == "adaptive" and sampling.budget_s(cfg) == 60.0
    assert sampling.job_budget_s(cfg, "E05") == pytest.approx(shares["E05"], abs=0.01)


def _resolved(extra=None):
    with open(cfgmod.ROOT / "config" / "config.yaml") as fh:
        base = yaml.safe_load(fh)
    return cfgmod.resolve({**base, "workload": "mlp", "device": "cpu", "run": "C00,E05",
                           **(extra or {})}, check_device=False)


def test_rule_fixed_leaves_contracts_unchanged():
    plain = _resolved()
    fixed = _resolved({"sampling": {"rule": "fixed", "budget_s": 60,
                                    "job_budget_s": {"E05": 10.0}}})
    for eid in ("C00", "E05"):
        assert cfgmod.contract(plain, eid) == cfgmod.contract(fixed, eid)


def test_a_budget_share_enters_only_its_jobs_contract():
    cfg = _resolved({"sampling": {"budget_s": 60, "job_budget_s": {"E05": 10.0}}})
    e05 = cfgmod.contract(cfg, "E05")
    assert sampling.job_budget_s(e05, "E05") == 10.0
    assert cfgmod.contract(cfg, "C00") == cfgmod.contract(_resolved(), "C00")


def test_schema_refuses_a_bad_rule():
    with pytest.raises(cfgmod.ConfigError):
        _resolved({"sampling": {"rule": "sometimes"}})


def _synthetic(center, spread=4.0, per_round=5, seed=0):
    """take(i): per-step shares around ``center`` (%); a fake clock of one second a round."""
    rng = np.random.default_rng(seed)
    return lambda i: {"input_share": list(center + spread * rng.standard_normal(per_round))}


def _clock():
    ticks = itertools.count()
    return lambda: float(next(ticks))


def test_adaptive_stops_early_on_a_clear_case():
    out = budgeted.until_decided(_synthetic(60.0), {"input_share": 25.0}, budget_s=1000,
                                 max_n=200, clock=_clock())
    assert out.reason == budgeted.DECIDED
    assert out.decisions["input_share"].state == "above"
    assert out.rounds * 5 < 200 / 4  # far below the fixed count's max


def test_adaptive_runs_to_its_budget_on_a_share_on_its_threshold():
    budget_rounds = 12
    out = budgeted.until_decided(_synthetic(25.0), {"input_share": 25.0},
                                 budget_s=budget_rounds, max_n=10_000, clock=_clock())
    assert out.reason == budgeted.BUDGET
    assert not out.decisions["input_share"].decided
    assert out.rounds >= budget_rounds // 2
    assert "undecided within budget" in out.decisions["input_share"].line("%", "steps")


def test_adaptive_waits_for_every_deciding_share():
    rng = np.random.default_rng(1)

    def take(i):
        return {"a": list(60 + rng.standard_normal(5)), "b": list(25 + rng.standard_normal(5))}

    out = budgeted.until_decided(take, {"a": 25.0, "b": 25.0}, budget_s=None, max_n=60)
    assert out.decisions["a"].decided and not out.decisions["b"].decided
    assert out.reason in (budgeted.MAX_N, budgeted.FUTILE)
