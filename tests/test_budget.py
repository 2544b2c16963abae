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


def test_a_budget_too_small_stops_before_any_job_and_prints_no_verdict(tmp_path):
    """The pre-flight says how much it needs in one line; no job ran, so no verdict is drawn
    (a newcomer read a whole 'undetermined' diagnosis of nothing under that line)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run(
        [sys.executable, "-m", "perflab", "diagnose", "mlp", "--device", "cpu", "--no-whatif",
         "--budget", "2s", "--configfile", str(root / "config" / "test.yaml"),
         "--directory", str(tmp_path)],
        capture_output=True, text=True, timeout=300, cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)})
    assert proc.returncode == 1, (proc.stdout[-2000:], proc.stderr[-2000:])
    # the whole budget that would do, the pre-flight's own seconds in it, and no negative
    # "budget -3 s" for what a pre-flight longer than the budget left
    import re

    need = re.search(r"give --budget (\d+)s or more", proc.stderr)
    spent = re.search(r"the pre-flight took (\d+) s of it", proc.stderr)
    assert need and spent and int(need[1]) > int(spent[1]) > 2, proc.stderr[-2000:]
    assert not re.search(r" -\d+ s", proc.stderr), proc.stderr[-2000:]
    assert "Verdict" not in proc.stdout and not (tmp_path / "results").exists(), proc.stdout


def test_split_sums_to_the_budget_and_reserves_fixed_jobs():
    shares = budget.split(60.0, FIXED, start_each_s=2.0, other_jobs=2)
    assert sum(shares.values()) == pytest.approx(60.0)
    assert shares["start-up"] == pytest.approx(2.0 * 6)
    # the jobs that run a fixed count get what it takes; the adaptive ones share the rest
    assert shares["R01"] == 5.0 and shares["R02"] == 2.0
    # each its first rounds (MIN_JOB_S without a contract), the rest by its fixed weight
    m = budget.MIN_JOB_S
    assert shares["E05"] - m == pytest.approx(2 * (shares["C00"] - m))
    assert list(shares) == ["start-up", *FIXED]


def test_split_too_small_a_budget_says_how_much():
    least = {"C00": 3.0, "E05": 4.0}
    with pytest.raises(budget.BudgetError, match="at least") as err:
        budget.split(10.0, FIXED, start_each_s=2.0, other_jobs=2, least=least)
    # its parts add up: the starts, the fixed counts and the adaptive jobs' first rounds
    msg, need = str(err.value), err.value.need_s
    assert need == pytest.approx(2.0 * 6 + FIXED["R01"] + FIXED["R02"] + 3.0 + 4.0)
    assert "4 measuring jobs and 2 other processes (12 s measured)" in msg
    assert "(7 s): at least 26 s" in msg, msg
    # the least it names runs without the first rounds overrunning it: each adaptive job's
    # share is at least its first rounds (a newcomer given the old least was warned at once)
    shares = budget.split(need, FIXED, start_each_s=2.0, other_jobs=2, least=least)
    assert all(shares[e] >= least[e] - 1e-9 for e in least), shares


def test_the_split_is_printed_and_the_estimate_does_not_exceed_twice_fixed():
    shares = budget.split(300.0, FIXED, start_each_s=2.0, other_jobs=2)
    est = budget.estimate_s(shares, FIXED)
    # a budget above what the fixed counts take: an adaptive job (C00, E05) stops at twice
    # its fixed time at most (its max_n: a fast step's A/A runs to it), the others at theirs
    assert est == pytest.approx(12.0 + sum(
        v * (budget.MAX_OVER_FIXED if e in budget.ADAPTIVE else 1) for e, v in FIXED.items()))
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


def test_rule_fixed_is_its_own_contract_and_carries_no_share():
    """A fixed-count run measures otherwise than the default adaptive one: its contract (the
    cache key) differs, so switching the rule never reuses the other rule's results; a budget
    share changes nothing under fixed, so it stays out of the contract."""
    plain = _resolved()
    fixed = _resolved({"sampling": {"rule": "fixed"}})
    fixed_shared = _resolved({"sampling": {"rule": "fixed", "budget_s": 60,
                                           "job_budget_s": {"E05": 10.0}}})
    for eid in ("C00", "E05"):
        assert cfgmod.contract(plain, eid) != cfgmod.contract(fixed, eid)
        assert cfgmod.contract(fixed, eid) == cfgmod.contract(fixed_shared, eid)
    assert sampling.rule(cfgmod.contract(fixed, "E05")) == sampling.FIXED


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


def test_until_precise_stops_when_precise_and_not_before_min_rounds():
    seen = []
    n, reason, _ = budgeted.until_precise(seen.append, lambda: len(seen) >= 4, budget_s=None,
                                          max_rounds=100, clock=_clock())
    assert (n, reason) == (4, budgeted.PRECISE)
    # a budget of one round's time: the minimum still runs, then the budget stops it
    seen.clear()
    n, reason, _ = budgeted.until_precise(seen.append, lambda: False, budget_s=1.5,
                                          max_rounds=100, min_rounds=3, clock=_clock())
    assert (n, reason) == (3, budgeted.BUDGET)
    seen.clear()
    n, reason, _ = budgeted.until_precise(seen.append, lambda: False, budget_s=None,
                                          max_rounds=7, clock=_clock())
    assert (n, reason) == (7, budgeted.MAX_N)


def test_the_floors_interval_narrows_with_more_pairs_and_holds_the_floor():
    from perflab.instruments import stats

    rng = np.random.default_rng(3)
    a, b = 10 + rng.normal(0, 0.3, 96), 10 + rng.normal(0, 0.3, 96)
    widths = []
    for n in (8, 96):
        lo, hi = stats.aa_floor_interval_pct(a[:n], b[:n], pairs=8)
        assert lo <= stats.aa_floor_pct(a[:n], b[:n], pairs=8) <= hi
        widths.append(hi - lo)
    assert widths[1] < widths[0] / 2


def test_the_second_instrument_gets_a_small_share_not_its_fixed_count():
    fixed = {**FIXED, "E06": 40.0}
    shares = budget.split(100.0, fixed, start_each_s=2.0, other_jobs=2)
    left = 100.0 - shares["start-up"]
    assert shares["E06"] == pytest.approx(budget.CORROBORATION_SHARE * left)
    assert sum(shares.values()) == pytest.approx(100.0)
    # when its fixed count costs less than the share, that is what it gets
    cheap = budget.split(100.0, {**FIXED, "E06": 1.0}, start_each_s=2.0, other_jobs=2)
    assert cheap["E06"] == 1.0


def test_the_estimate_counts_only_the_parts_c00_runs_and_r02s_own_steps():
    from perflab.pipeline import preflight

    cfg = _resolved({"run": "C00,R02"})
    c00 = cfgmod.contract(cfg, "C00")
    diag = {**c00, "params": {**c00["params"], "parts": ["clock", "aa"]}}
    calls, extra = preflight.step_calls(diag)
    p, t = c00["params"], c00["timing"]
    assert calls == 2 * p["aa_blocks"] * p["aa_inner"] + 2 * t["warmup"]
    assert extra == 0  # no fresh processes, no peer timers
    assert preflight.step_calls(c00)[0] > calls and preflight.step_calls(c00)[1] > 0
    r02 = cfgmod.contract(cfg, "R02")
    assert preflight.step_calls(r02)[0] == sum(
        r02["params"].get(k, 0) for k in ("wait", "warmup", "active", "sync_steps", "steps"))


def test_r01_and_r02_are_costed_from_probes_of_their_instruments():
    """R01's ceilings run at matmul and copy speed and R02's window at the profiler's, not at
    the step's: with probes, a slow matmul or a slow profiler makes them cost more, the step
    time alone barely moves them (the 2-core CPU: R01 4.0 s, R02 2.2 s measured against the
    step-call estimate's 1 and 0 s)."""
    from perflab.pipeline import preflight

    cfg = _resolved({"run": "R01,R02"})
    r01, r02 = cfgmod.contract(cfg, "R01"), cfgmod.contract(cfg, "R02")
    p = r01["params"]
    n = max(p["matmul_sizes"])
    probes = {"matmul_flops": 2 * n ** 3 / 0.1,  # the largest matmul: 100 ms a call
              "host_memcpy_ms_per_mib": 0.1, "profile_window_s": 3.0}
    est = preflight.estimate_s([r01, r02], 1.0, probes)
    reps = p["repeats"] + 2
    dtypes = len(set(p["dtypes"])) + 1
    # at least the largest size's samples in every dtype, each 100 ms
    assert est["R01"] > reps * 0.1 * dtypes
    window = r02["params"]["warmup"] + r02["params"]["active"]
    assert est["R02"] >= window * 1.0  # 3 s for the probe's 3 steps: 1 s a profiled step
    faster = preflight.estimate_s([r01, r02], 1.0, {**probes, "matmul_flops": probes[
        "matmul_flops"] * 100, "profile_window_s": 0.3})
    assert faster["R01"] < est["R01"] / 2 and faster["R02"] < est["R02"] / 5
    # a probed bfloat16 rate costs the half precisions at it (an H100's bfloat16 matmul runs
    # ~10x float32's; all at float32's put R01 at 27 s where it ran 10), float32 unmoved
    half = [d for d in p["dtypes"] if d in preflight.HALF_DTYPES]
    assert half, "the chapter's R01 calibrates a half precision"
    with_bf16 = preflight.estimate_s([r01], 1.0, {**probes, "matmul_flops_bf16": probes[
        "matmul_flops"] * 10})["R01"]
    assert with_bf16 < est["R01"] - 0.8 * reps * 0.1 * len(half)
    assert with_bf16 > reps * 0.1 * 2  # float32 and the contract's dtype: still 100 ms a call
    # without probes: the step calls, as before
    assert preflight.estimate_s([r02], 1.0)["R02"] == preflight.step_calls(r02)[0] / 1e3


def test_the_probes_are_measured_on_the_step(tmp_path):
    import torch

    from perflab.pipeline import preflight

    lin = torch.nn.Linear(64, 64)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)

    def step():
        opt.zero_grad()
        lin(torch.randn(32, 64)).square().mean().backward()
        opt.step()

    got = preflight.probe_instruments(step, "cpu", lambda: None)
    assert set(got) == {"profile_window_s", "matmul_flops", "host_memcpy_ms_per_mib",
                        "host_fill_ms_per_mib"}
    assert all(np.isfinite(v) and v > 0 for v in got.values()), got
    # a phased step (as the pre-flight builds and R01 counts) also has its counted step timed
    from perflab.instruments import steps, workloads

    phased = steps.build(workloads.build("mlp", "cpu", dim=16, depth=1, num_classes=4,
                                         batch=4), "cpu")
    counted = preflight.probe_instruments(phased, "cpu", lambda: None)
    assert counted["counted_step_s"] > 0


def test_a_probe_that_fails_leaves_the_step_time_and_says_why(monkeypatch):
    """The probes feed an estimate: one that raises is said, never the pre-flight's failure;
    the estimate then falls back to step calls."""
    from perflab.pipeline import preflight

    def broken(*a, **k):
        raise RuntimeError("no profiler here")

    monkeypatch.setattr(preflight, "probe_instruments", broken)
    monkeypatch.setenv(preflight.PROBE_ENV, "1")
    monkeypatch.setattr(preflight, "TIMED_STEPS", 2)
    got = preflight.measure_step({"device": "cpu", "target": "mlp", "tag": "t",
                                  "dtype": "float32", "params": {"batch": 8, "dim": 32}})
    assert got["ok"] and got["step_ms"] and "probes" not in got, got
    assert got["probe_error"] == "RuntimeError: no profiler here"


def _decision_row(eid, variant, line):
    from perflab.core.names import SAMPLING_DECISION

    return {"experiment": eid, "variant": variant, "workload": "w", "model": "m",
            "input_shape": "[1]", "dtype": "float32", "device": "cpu", "device_name": "d",
            "mode": "train", "execution": "eager", "metric": SAMPLING_DECISION, "window": "w",
            "sync_boundary": "s", "statistic": "mean", "value": 30.0, "unit": "%", "n": 40,
            "status": "ok", "reason": line}


def _diagnosis(*lines):
    import pandas as pd

    from perflab.instruments import sequential as seq
    from perflab.views import diagnose

    rng = np.random.default_rng(0)
    decisions = {
        "decided": seq.decide(list(60 + rng.standard_normal(40)), 25.0),
        "undecided": seq.decide(list(25 + 4 * rng.standard_normal(40)), 25.0, max_n=40),
    }
    rows = [_decision_row("E05", f"q{i}", decisions[k].line("%", "steps"))
            for i, k in enumerate(lines)]
    from perflab.core import io

    return diagnose.diagnose(pd.DataFrame(rows, columns=io.COLUMNS)), diagnose


def test_diagnosis_md_says_decided_or_undecided_and_what_a_cut_short_verdict_lacked():
    d, view = _diagnosis("decided", "undecided")
    md = view.render_markdown(d)
    assert "`E05 q0`: decided: above 25 %" in md
    assert "`E05 q1`: undecided within budget (40 steps" in md
    assert "Cut short by the budget:** this verdict lacks `E05 q1` decided" in md
    assert [s.source for s in d.cut_short] == ["E05 q1"]


def test_a_verdict_whose_sampled_evidence_is_decided_is_not_cut_short():
    d, view = _diagnosis("decided")
    md = view.render_markdown(d)
    assert "Sampling" in md and "Cut short" not in md
    # its words said once, under its lines; not where nothing was sampled
    assert "the A/A floor: how far two identical copies of your step" in md
    assert "an anytime interval: a 95% interval" in md
    plain, _ = _diagnosis()
    assert "Sampling" not in view.render_markdown(plain) and plain.sampled == []
    assert "anytime interval:" not in view.render_markdown(plain)


def test_an_experiment_of_two_processes_gives_each_half_its_share(tmp_path):
    shares = budget.split(60.0, FIXED, start_each_s=2.0, other_jobs=2)
    path = tmp_path / "sampling.yaml"
    budget.write_config(path, shares, 60.0, {"E05": 2})
    cfg = yaml.safe_load(path.read_text())
    assert sampling.job_budget_s(cfg, "E05") == pytest.approx(shares["E05"] / 2, abs=0.01)
    assert sampling.job_budget_s(cfg, "C00") == pytest.approx(shares["C00"], abs=0.01)


def test_each_adaptive_job_gets_at_least_its_first_rounds():
    contracts = {"C00": {"params": {"aa_blocks": 12}}, "E05": {"params": {"blocks": 10}}}
    least = budget.least_s(contracts, FIXED)
    assert least["C00"] == pytest.approx(30.0 * 6 / 12) and least["E05"] == pytest.approx(6.0)
    shares = budget.split(40.0, FIXED, start_each_s=2.0, other_jobs=2, least=least)
    assert shares["C00"] >= least["C00"] and shares["E05"] >= least["E05"]
    assert sum(shares.values()) == pytest.approx(40.0)
    # a budget short of the first rounds: they run anyway, so the shares follow them and
    # the estimate says the run will overrun (no refusal on an estimate)
    short = budget.split(35.0, FIXED, start_each_s=2.0, other_jobs=2, least=least)
    assert sum(short.values()) == pytest.approx(35.0)
    assert short["C00"] / short["E05"] == pytest.approx(least["C00"] / least["E05"])
    assert budget.estimate_s(short, FIXED, least) > 35.0


def test_an_imprecise_floor_cuts_a_verdict_short_only_where_a_note_reads_it():
    import pandas as pd

    from perflab.core import io
    from perflab.views import diagnose

    floor = _decision_row("C00", "aa", "undecided within budget: the A/A floor is 3.6 % (...)")
    far = diagnose.diagnose(pd.DataFrame([floor], columns=io.COLUMNS))
    assert far.sampled and not far.cut_short  # no finding near its threshold: nothing rests on it
    far.findings[0].borderline = "the input share (26%) is within this run's A/A floor"
    assert [s.source for s in far.cut_short] == ["C00 aa"]


def test_the_estimate_is_a_range_from_first_looks_to_spent_shares():
    contracts = {"C00": {"params": {"aa_blocks": 12}}, "E05": {"params": {"blocks": 10}}}
    least = budget.least_s(contracts, FIXED)
    shares = budget.split(60.0, FIXED, start_each_s=2.0, other_jobs=2, least=least)
    lo, hi = budget.estimate_low_s(shares, FIXED, least), budget.estimate_s(shares, FIXED)
    assert lo < hi <= 60.0 + 1e-9
    assert hi - lo == pytest.approx(sum(min(shares[e], FIXED[e]) - least[e]
                                        for e in ("C00", "E05")))
    assert f"estimated {10 + lo:.0f}-{10 + hi:.0f} s from the command" in \
        budget.line(70, shares, 10.0, hi, lo)
    # and its middle, the likely wall (neither end is: jobs decide early or run to their max)
    assert f"to the verdict, about {10 + (lo + hi) / 2:.0f} s (the low end" in \
        budget.line(70, shares, 10.0, hi, lo)


def test_a_share_decided_by_its_anytime_interval_is_not_near_its_threshold():
    import pandas as pd

    from perflab.core import io
    from perflab.core.names import PHASES
    from perflab.experiments.c00_calibration import AA_FLOOR
    from perflab.views import diagnose

    def row(eid, variant, metric, value, reason=""):
        return {**_decision_row(eid, variant, reason), "metric": metric, "value": value,
                "statistic": "value"}

    shares = {p: 5.0 for p in PHASES}
    shares.update(input_wait=20.0, host_to_device=1.0, optimizer=40.0, forward=14.0,
                  backward=10.0)
    base = [row("E05", f"sync/{p}", "phase_share", v) for p, v in shares.items()]
    base.append(row("C00", AA_FLOOR[0], AA_FLOOR[1], 30.0))  # a wide floor: both shares near

    def finding(extra, name):
        d = diagnose.diagnose(pd.DataFrame(base + extra, columns=io.COLUMNS))
        return next(f for f in d.findings if f.bottleneck == name)

    assert finding([], "optimizer").borderline  # the floor alone: near
    decided = _decision_row("E05", "optimizer_share", "decided: above 25 % (...)")
    undecided = _decision_row("E05", "optimizer_share", "undecided within budget (...)")
    assert finding([decided], "optimizer").borderline == ""
    assert finding([undecided], "optimizer").borderline
    assert finding([decided], "input_pipeline").borderline  # its own share was not decided


def test_a_forked_jobs_start_is_its_device_start_and_check_not_the_childs_interpreter():
    """With the fork server a job inherits the imports: its start is the check (build, first
    step) and a device start — the server's probe fork's where it is known (the pre-flight
    child's own read the device's libraries from a cold disk), the child's where not."""
    answer = {"check_s": 1.0, "device_init_s": 3.0, "steps_s": 0.5}
    assert budget.start_s(answer, 9.0, fork_server=False) == pytest.approx(8.5)
    assert budget.start_s(answer, 9.0, fork_server=True) == pytest.approx(4.0)
    assert budget.start_s(answer, 9.0, fork_server=True, fork_device_s=0.4) == pytest.approx(1.4)
    # a fresh interpreter pays at least the device start and the check
    assert budget.start_s(answer, 2.0, fork_server=False) == pytest.approx(4.0)
    # a second check, without the libraries' first use (which the probe fork paid)
    warm = {**answer, "check_warm_s": 0.3}
    assert budget.start_s(warm, 9.0, fork_server=True, fork_device_s=0.4) == pytest.approx(0.7)
    assert budget.start_s(warm, 9.0, fork_server=True) == pytest.approx(4.0)  # no probe: not
    assert budget.start_s(warm, 9.0, fork_server=False) == pytest.approx(8.5)
    # a compiled step: the first check holds its first (cold) compile, so it stands
    compiled = {**warm, "compiler": {"compile_s": 2.0}}
    assert budget.start_s(compiled, 9.0, fork_server=True, fork_device_s=0.4) == \
        pytest.approx(0.4 + 1.0 + 2.0)


def test_the_pre_flights_split_names_its_parts_and_adds_up():
    from perflab.pipeline import preflight

    answer = {"device_init_s": 2.0, "check_s": 1.0, "lock_wait_s": 0.0, "steps_s": 3.0,
              "probe_s": 2.5}
    text = preflight.child_split(answer, 10.0)
    assert text.startswith("start 4.0 s, device start 2.0 s, check 1.0 s")
    assert "6 full-batch steps 0.5 s" in text and "R01/R02 probes 2.5 s" in text
    assert "lock" not in text  # no wait: not a part worth a word


def test_on_a_small_host_the_pre_flight_times_its_steps_once_the_fork_server_is_ready(
        monkeypatch, tmp_path):
    """Its imports took a core of the 2-core CPU while the pre-flight's steps were timed (a
    20 ms step read 122 ms); a host with cores to spare does not wait."""
    import threading

    from perflab.core import forkserver
    from perflab.pipeline import preflight

    sock = tmp_path / "s.sock"
    monkeypatch.setenv(forkserver.ENV_SOCKET, str(sock))
    monkeypatch.setenv(preflight.PROBE_ENV, "1")
    monkeypatch.setattr(preflight.os, "sched_getaffinity", lambda _: {0, 1}, raising=False)
    threading.Timer(0.3, sock.touch).start()
    assert preflight._wait_for_server() >= 0.25 and sock.exists()
    monkeypatch.setattr(preflight.os, "sched_getaffinity", lambda _: set(range(16)),
                        raising=False)
    sock.unlink()
    assert preflight._wait_for_server() == 0.0
    monkeypatch.delenv(forkserver.ENV_SOCKET)
    monkeypatch.setattr(preflight.os, "sched_getaffinity", lambda _: {0}, raising=False)
    assert preflight._wait_for_server() == 0.0
    monkeypatch.setenv(forkserver.ENV_SOCKET, str(tmp_path / "none.sock"))
    monkeypatch.delenv(preflight.PROBE_ENV)  # no budget: its step time is not split on
    assert preflight._wait_for_server() == 0.0


def test_the_second_check_builds_and_steps_the_workload_again():
    """What a forked job's build and first step cost (the first check also paid the
    libraries' first use in a process): its own seconds, positive."""
    import torch

    from perflab.pipeline import preflight

    spec = {"target": "mlp", "params": {}}  # the CPU MLP: ~1 s to build and step
    took = preflight._check_again(spec, torch.device("cpu"))
    assert 0 < took < 60


def test_r01_pays_its_copy_buffers_and_r02_its_located_syncs():
    """R01 fills its host buffer and page-locks a buffer each way over the link before it
    times a copy (on an H100 ~1.5 s of its 5 s, the timed copies ~0.5 s); R02 runs its
    sync-locating steps under the sync debug mode, a stack per sync (a step of ~100 syncs
    is far slower there than its step time): each probed, each costed."""
    from perflab.pipeline import preflight

    cfg = _resolved({"run": "R01,R02"})
    r01, r02 = cfgmod.contract(cfg, "R01"), cfgmod.contract(cfg, "R02")
    base = {"matmul_flops": 1e12, "host_memcpy_ms_per_mib": 0.1, "profile_window_s": 0.3,
            "device_to_device_ms_per_mib": 0.001, "host_to_device_ms_per_mib": 0.02}
    est = preflight.estimate_s([r01, r02], 1.0, base)
    p = r01["params"]
    filled = preflight.estimate_s([r01], 1.0, {**base, "host_fill_ms_per_mib": 1.0,
                                               "pinned_fill_ms_per_mib": 2.0})["R01"]
    want = (p["host_copy_mib"] * 1.0 + 2 * p["copy_mib"] * 2.0) / 1e3
    assert filled - est["R01"] == pytest.approx(want)
    # its counted step at the probed one, not at a step call's time
    counted = preflight.estimate_s([r01], 1.0, {**base, "counted_step_s": 0.8})["R01"]
    assert counted - est["R01"] == pytest.approx(0.8 - 1e-3)
    # the sync-locating steps at the probed step under the debug mode, not at the step time
    located = preflight.estimate_s([r02], 1.0, {**base, "sync_locate_s": 0.5})["R02"]
    assert located - est["R02"] == pytest.approx(r02["params"]["sync_steps"] * (0.5 - 1e-3))


def test_the_split_waits_for_the_fork_servers_probe_before_costing_a_start(
        tmp_path, monkeypatch, capsys):
    """A job's start is the server's probe fork plus the pre-flight's second check; where
    the pre-flight finished before the server was ready (on an H100, a 13 s pre-flight of a
    15 ms step) the split costed each start at the cold first check (4.6-5.9 s against a
    1 s fork) and refused --budget 60s. It now waits for the server's probe."""
    import argparse
    import json
    import threading
    import time

    from perflab import cli
    from perflab.core import forkserver

    cfg = _resolved({"fork_server": True})
    sock = tmp_path / "s.sock"

    def ready():
        (tmp_path / f"s.sock{forkserver.PROBE_SUFFIX}").write_text(json.dumps({"probe_s": 0.5}))
        sock.touch()

    threading.Timer(0.4, ready).start()
    monkeypatch.setattr(cli, "_STARTED_UNIX", time.time())
    args = argparse.Namespace(budget=600.0, directory=str(tmp_path), command="diagnose",
                              no_whatif=True)
    answer = {"step_ms": 5.0, "check_s": 5.0, "check_warm_s": 0.25, "device_init_s": 0.2,
              "steps_s": 0.1}
    assert cli._split_budget(args, cfg, answer, 8.0, {forkserver.ENV_SOCKET: str(sock)}) == 0
    out = capsys.readouterr().out
    assert "start-up a job 0.8 s" in out, out  # the probe 0.5 + the second check 0.25


def test_the_host_probes_run_on_a_jobs_threads(monkeypatch):
    """A job runs on the threads it is given (one under --cores 1); the pre-flight child on
    every core. On an H100's 16-core host the probe's host copy ran at 170 GB/s where R01's
    ran at 11: R01 was estimated short by the difference. The probes of host copies and of a
    CPU's matmul now run on a job's threads, and the child's are restored after."""
    import torch

    from perflab import cli
    from perflab.pipeline import preflight

    seen = {}

    def copies(device, sync):
        seen["copies"] = torch.get_num_threads()
        return {}

    monkeypatch.setattr(preflight, "_copy_probes", copies)
    monkeypatch.setenv(preflight.PROBE_THREADS_ENV, "1")
    before = torch.get_num_threads()
    lin = torch.nn.Linear(8, 8)
    preflight.probe_instruments(lambda: lin(torch.ones(2, 8)).sum().backward(), "cpu",
                                lambda: None)
    assert seen["copies"] == 1 and torch.get_num_threads() == before
    # what the command hands the child: the config's threads, or the cores a job is given
    args = cli.parser().parse_args(["diagnose", "mlp", "--cores", "3"])
    assert cli._job_threads(args, {"threads": "auto"}) == 3
    assert cli._job_threads(args, {"threads": 2}) == 2


def test_a_long_step_gets_shorter_aa_blocks_under_a_budget_a_short_one_keeps_its_own():
    """At 30 calls a block the A/A's first rounds (6 pairs) took 48-57 s of a 133-159 ms
    step on an H100; under a budget a block lasts about half a second, never below the
    short-block floor's 10 calls nor above the configured count."""
    from perflab.experiments.c00_calibration import AA_SHORT_INNER, aa_inner_under_budget

    assert aa_inner_under_budget(3.6, 30) == 30  # the chapter MLP: unchanged
    assert aa_inner_under_budget(25.0, 30) == 20
    assert aa_inner_under_budget(133.0, 30) == AA_SHORT_INNER  # not 3: a floor of 3 calls
    assert aa_inner_under_budget(40.0, 8) == 8  # never more than configured
    contracts = {"C00": {"params": {"aa_inner": 30, "aa_blocks": 48}}, "E05": {"params": {}}}
    assert budget.sized_for_step(contracts, 4.0) == {}
    assert budget.sized_for_step(contracts, 133.0) == {"C00": {"aa_inner": AA_SHORT_INNER}}
    # a what-if's A/Bs are judged against the floor in blocks of their own length: kept
    assert budget.sized_for_step({**contracts, "W01": {"params": {"inner": 30}}}, 133.0) == {}


def test_params_sized_for_the_step_reach_the_jobs_contract(tmp_path):
    """The sampling config carries them under ``experiments``, merged over the run's own:
    C00's contract (its parameters and its cache key) has the shortened blocks, the rest of
    its parameters as configured."""
    shares = budget.split(60.0, FIXED, start_each_s=2.0, other_jobs=2)
    path = tmp_path / "sampling.yaml"
    budget.write_config(path, shares, 60.0, params={"C00": {"aa_inner": 10}})
    over = {"workload": "mlp", "device": "cpu", "run": "C00,E05"}
    own = cfgmod.contract(cfgmod.load([], over), "C00")
    c00 = cfgmod.contract(cfgmod.load([path], over), "C00")
    assert own["params"]["aa_inner"] != 10 and c00["params"]["aa_inner"] == 10
    assert {k: v for k, v in c00["params"].items() if k != "aa_inner"} == \
        {k: v for k, v in own["params"].items() if k != "aa_inner"}
    assert sampling.job_budget_s(c00, "C00") == pytest.approx(shares["C00"], abs=0.01)
