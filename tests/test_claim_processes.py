"""claim_processes: a claim of an experiment run in several fresh processes is decided only
where every process decides it alike (perflab.kit.claims.agree), judged from each process's own
rows and samples with the rest of the run as it is."""

from __future__ import annotations

import pandas as pd
import pytest
from claims_rows import floor, rows
from test_e05_phases import e05_sampled

from perflab import experiments
from perflab.core import io
from perflab.kit import claims
from perflab.kit.claims import DIFFERS, ERROR, INCONCLUSIVE, NOT_RUN, REPRODUCED, Verdict
from perflab.pipeline import config

R, D, U = (Verdict(REPRODUCED, "r", noise_tested=True), Verdict(DIFFERS, "d", noise_tested=True),
           Verdict(INCONCLUSIVE, "i", noise_tested=True))


def test_processes_that_agree_keep_the_verdict():
    v = claims.agree([R, Verdict(REPRODUCED, "r2", noise_tested=True)])
    assert v.verdict == REPRODUCED and "the same in 1 further process(es): process 2: r2" \
        in v.measured and v.noise_tested
    assert claims.agree([D, D, D]).verdict == DIFFERS


@pytest.mark.parametrize("others, why", [
    ([D], "moves with the process"),  # the flip one process of each run would show
    ([U], "not every process"),
    ([Verdict(NOT_RUN, "no rows")], "not every process"),  # a process that never ran
    ([R, D], "moves with the process"),
])
def test_processes_that_disagree_leave_it_undecided(others, why):
    v = claims.agree([R, *others])
    assert v.verdict == INCONCLUSIVE and why in v.mechanism, v
    assert "process 1: REPRODUCED (r)" in v.measured and "process 2:" in v.measured


def test_an_instrument_error_in_any_process_is_an_error():
    assert claims.agree([R, Verdict(ERROR, "failed")]).verdict == ERROR
    assert claims.agree([Verdict(ERROR, "failed"), R]).verdict == ERROR


def test_an_experiment_that_did_not_run_stays_not_run():
    assert claims.agree([Verdict(NOT_RUN, "E05 not run"), R]).verdict == NOT_RUN


def e05_run(gap_pct: float):
    """E05's rows and samples with C00's floor beside them: (rows, samples)."""
    frame = e05_sampled(gap_pct=gap_pct, total_sd=0.02)
    smp = frame.attrs["samples"]
    bare = pd.concat([frame, rows(*floor(2.0))], ignore_index=True)
    bare.attrs = {}
    return bare, smp


def c11(main_gap: float, *process_gaps: float) -> claims.Verdict:
    rows_, smp = e05_run(main_gap)
    further = []
    for g in process_gaps:
        r, s = e05_run(g)
        further.append((r[r.experiment == "E05"], s))
    frame = experiments.evaluate_claims(rows_, {"C11": experiments.claim_registry()["C11"]}, samples=smp,
                            processes={"E05": further} if further else None)
    return frame.iloc[0]


def test_c11_flip_of_one_process_each_is_undecided_with_a_second():
    """The H200 pair at aecf7ce: +7.9% in one run's E05, +12.7% in the next, each tight:
    each run alone decides it, the opposite ways; a second process landing on the other side
    of 10% leaves the run undecided, and two that agree decide it."""
    assert c11(7.9).verdict == REPRODUCED and c11(12.7).verdict == DIFFERS
    mixed = c11(7.9, 12.7)
    assert mixed.verdict == INCONCLUSIVE, mixed.measured
    assert "+7.9%" in mixed.measured and "+12.7%" in mixed.measured
    assert c11(12.7, 7.9).verdict == INCONCLUSIVE
    agreed = c11(7.9, 7.0)
    assert agreed.verdict == REPRODUCED and "2 fresh processes of E05" in agreed.tolerance
    assert c11(12.7, 14.0, 16.0).verdict == DIFFERS


def test_a_further_process_replaces_only_its_experiments_rows():
    main, smp = e05_run(7.9)
    other, other_smp = e05_run(12.7)
    ev = claims.in_process(experiments.evidence(main, smp), "E05",
                           other[other.experiment == "E05"], other_smp)
    assert ev.has("C00") and len(ev.rows) == len(main)  # C00's floor is the run's, kept
    assert ev.value("E05", "sum_minus_total", "step_latency_rel", "value") == pytest.approx(12.7)
    assert len(ev.samples) == len(smp)


def test_process_jobs_and_outputs(tiny_cfg):
    cfg = dict(tiny_cfg, claim_processes={"E05": 3, "E03": 1})
    assert config.process_jobs(cfg) == [("E05", 2), ("E05", 3)]
    out = config.process_outputs(cfg, "E05", 2)
    d = f"results/{tiny_cfg['resolved_tag']}/processes"
    assert out == {"csv": f"{d}/e05_phases_p2.csv", "samples": f"{d}/e05_phases_p2_samples.csv",
                   "provenance": f"{d}/e05_phases_p2.json"}
    assert config.process_jobs(dict(cfg, resolved_experiments=["E01"])) == []


def test_read_processes_pairs_rows_with_samples(tmp_path):
    frame = e05_sampled(gap_pct=5.0)
    smp = frame.attrs["samples"]
    frame = frame[frame.experiment == "E05"]
    frame.attrs = {}
    d = tmp_path / io.PROCESSES_DIR
    d.mkdir()
    io.write_results(d / "e05_phases_p2.csv", frame.to_dict("records"))
    io.write_samples(d / "e05_phases_p2_samples.csv", smp.to_dict("records"))
    csvs, samples = io.process_files(tmp_path)
    got = io.read_processes(csvs, samples)
    assert list(got) == ["E05"] and len(got["E05"]) == 1 and len(got["E05"][0][1]) == len(smp)
    with pytest.raises(io.ContractError, match="one samples CSV per process"):
        io.read_processes(csvs, [*samples, *samples])
